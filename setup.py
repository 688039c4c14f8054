"""Build hook: ship the top-level templates/, clusters/ and jobspecs/ inside the package, from the one copy.

Everything else about the build is declared in pyproject.toml. The package list is found (every
``nomad_gpu`` package, so a new one needs no edit here) plus the directories mapped in as
``nomad_gpu._templates``, ``nomad_gpu._clusters`` and ``nomad_gpu._jobspecs``; their files are package data
(pyproject.toml).
nomad_gpu/bundled.py is the one place that reads them back.
"""

from setuptools import find_namespace_packages, setup

BUNDLED = {"nomad_gpu._templates": "templates", "nomad_gpu._clusters": "clusters", "nomad_gpu._jobspecs": "jobspecs"}

setup(
    packages=[*find_namespace_packages(include=["nomad_gpu", "nomad_gpu.*"], exclude=["*__pycache__*"]), *BUNDLED],
    package_dir=BUNDLED,
)
