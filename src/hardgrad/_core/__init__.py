"""Private plumbing that every family of hardgrad builds on; it imports nothing from them.

* :mod:`~hardgrad._core.validation`: argument checks with messages that name the argument,
  and the switch :func:`hardgrad.set_validation` for the value scans that would sync a GPU.
* :mod:`~hardgrad._core.kernels`: small tensor helpers (the compute dtype of half types,
  cached constants, masks that ``torch.compile`` can store, a first-max ``argmax``).
* :mod:`~hardgrad._core.ulp`: exact float arithmetic (error-free splits, directed rounding)
  for the surrogates' last-ulp formulas.
* :mod:`~hardgrad._core.registry`: the name registry that estimators and surrogates share.
* :mod:`~hardgrad._core.checkpoint`: settings stored in modules' state dicts.
* :mod:`~hardgrad._core.compat`: work-arounds for differences between torch releases.
* :mod:`~hardgrad._core.compiler`: ``torch.compiler`` helpers imported only when used.

Nothing here is public API; the layers above import from these modules directly.
"""
