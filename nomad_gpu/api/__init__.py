"""The HTTP API's wire shapes, shared by the service that sends them and the CLI that reads them.

A layer of its own below both (cli -> service -> api), importing nothing of ours but the error tree, so
neither side can drift from the other: `payloads` are the shapes, `codec` turns them into JSON, back, and
into JSON Schema.
"""
