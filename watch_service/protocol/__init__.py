"""Pure protocol logic: names, request validation, record/frame encoding, cursors, tombstones.

Nothing here does I/O or imports an I/O library, so all of it is testable without a socket,
a database or an event loop.
"""
