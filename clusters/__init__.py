"""The bundled dev-cluster files, shipped inside the package as ``nomad_gpu._clusters`` (see setup.py).

Not code: this file only makes the directory a package, so an editable install finds the clusters
through importlib.resources just as a wheel does; `--cluster NAME` picks one by its file name.
"""
