"""Notifications (the provider layout): what an alert says (`alerts`), how it reads
(`alerts_render`) and how it is sent, once per run, kind and channel (`notifiers`)."""
