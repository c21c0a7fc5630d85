"""What the browser tests (and the dashboard benchmarks) share."""

# Browser waits poll on a timer, a frame's time apart: requestAnimationFrame (Playwright's
# default) can stop firing on a loaded box and a wait then times out with the page drawn.
POLL_MS = 16
