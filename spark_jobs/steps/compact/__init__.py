"""compact: landing-zone segments -> the deliveries table."""
