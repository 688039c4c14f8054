"""The default job templates, shipped inside the package as ``nomad_gpu._templates`` (see setup.py).

Not code: this file only makes the directory a package, so an editable install finds the templates
through importlib.resources just as a wheel does. Edit the ``*.hcl.j2`` files beside it.
"""
