"""The example job specs, shipped inside the package as ``nomad_gpu._jobspecs`` (see setup.py).

Not code: this file only makes the directory a package, so an editable install finds the examples
through importlib.resources just as a wheel does; `nomad-gpu example NAME` prints one. Edit the
``*.yaml`` files beside it.
"""
