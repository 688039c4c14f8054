"""The `nomad-gpu` command line."""
