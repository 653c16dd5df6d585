"""What live views send the browser: table deltas, the task stream and the profile,
in one message format."""
