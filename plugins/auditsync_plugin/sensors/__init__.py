"""Sensors (the provider layout): the sinks' cursors against the watch service's heads."""
