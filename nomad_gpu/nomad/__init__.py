"""The Nomad edge: the only package that knows Nomad's JSON field names and HTTP API."""
