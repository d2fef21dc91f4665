"""The simulated NPU backend: chips described by ``DIR/chips.yaml``, state in ``DIR/state.txt``.

* ``config`` - reads and validates ``chips.yaml``.
* ``state`` - the state records and their line-oriented text form (shared with the C stand-in).
* ``store`` - locked reads and atomic updates of the state file, creation from ``chips.yaml``.
* ``backend`` - ``SimBackend``, the ``Backend`` protocol over the directory.
* ``control`` - fault, load and container-use injection.
* ``__main__`` - ``python -m vnpu_npu.sim DIR ...`` for people and the sandbox.
"""
