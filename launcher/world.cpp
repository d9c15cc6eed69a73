// filled by the launcher work in progress
