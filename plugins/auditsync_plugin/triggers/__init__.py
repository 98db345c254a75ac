"""Triggers (the provider layout): the deferred wait of the sink-cursor sensor."""
