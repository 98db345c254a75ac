"""Entry point Airflow's plugin loader finds: the plugin itself lives in the package."""

from auditsync_plugin import AuditsyncPlugin

__all__ = ["AuditsyncPlugin"]
