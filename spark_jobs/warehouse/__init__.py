"""The warehouse's one owner: the Iceberg tables' names, locations and column sets
(``layout``, ``schemas``), the commits and metadata reads through Spark (``tables``) and the
reads from Python through pyiceberg (``readers``). Nothing outside this package commits to a
table, reads a snapshot or names a table. Importing the package costs nothing (``layout`` is
read by DAG parsing); ``tables`` and ``readers`` import pyspark and pyiceberg themselves."""
