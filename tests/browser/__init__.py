"""Real-browser tests: the demo page and rstreams.js in headless Chromium."""
