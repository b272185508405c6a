"""One module per schema revision, each naming the revision before it."""
