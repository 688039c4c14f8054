"""The parse shape cache returns exactly what a direct python-hcl2 parse returns."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nomad_gpu.devcluster.hcl import _loads
from nomad_gpu.devcluster.hclcache import ShapeCache
from nomad_gpu.render import hcl_string

TEMPLATE = """job {job} {{
  type = "batch"
  meta {{
    owner = {meta}
  }}
  # a comment with a "quoted" word and a lone " quote
  constraint {{
    attribute = "${{node.unique.id}}"
    value     = {node}
  }}
  group "main" {{
    task "t" {{
      driver = "docker"
      config {{
        image = {image}
        args  = [{args}]
      }}
    }}
  }}
}}
"""


def direct(text: str) -> object:
    return _loads(text)  # the dev cluster's own options: comments are not part of the tree


def render(job: str, meta: str, node: str, image: str, args: list[str]) -> str:
    return TEMPLATE.format(job=hcl_string(job), meta=hcl_string(meta), node=hcl_string(node),
                           image=hcl_string(image), args=", ".join(hcl_string(a) for a in args))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=12), st.text(max_size=20), st.text(max_size=20),
                          st.text(max_size=20), st.lists(st.text(max_size=8), max_size=3)), min_size=2, max_size=4))
def test_cached_parse_equals_direct_parse(jobs: list[tuple[str, str, str, str, list[str]]]) -> None:
    cache = ShapeCache(direct)
    for job, meta, node, image, args in jobs:
        text = render(job, meta, node, image, args)
        assert cache.loads(text) == direct(text)


def test_a_shape_is_parsed_once_then_served_from_the_cache() -> None:
    cache = ShapeCache(direct)
    for i in range(5):
        text = render(f"job-{i}", "alice", f"node-{i}", "busybox", ["--epochs", str(i)])
        assert cache.loads(text) == direct(text)
    assert (cache.misses, cache.hits) == (1, 4)


def test_heredocs_bypass_the_cache() -> None:
    cache = ShapeCache(direct)
    text = 'job "x" {\n  meta {\n    note = <<EOT\nsay "hi"\nEOT\n  }\n}\n'
    assert cache.loads(text) == direct(text)
    assert (cache.misses, cache.hits) == (0, 0)


def test_a_shape_that_does_not_round_trip_is_never_cached() -> None:
    import hcl2

    cache = ShapeCache(hcl2.loads)  # with comments in the tree, placeholders would leak into them
    text = render("a", "b", "c", "d", [])
    assert cache.loads(text) == hcl2.loads(text)
    assert cache.loads(text) == hcl2.loads(text)
    assert cache.hits == 0
