r"""``audit()``: where does gradient flow die or change in *your* forward and backward?

Inside ``with hg.diagnostics.audit() as report:`` a :class:`torch.overrides.TorchFunctionMode`
watches every torch function and tensor method that your own code calls (calls made from
inside torch, hardgrad or another installed package are not inspected, so
``F.gumbel_softmax``'s internal ``argmax`` or ``hg.round``'s ``torch.round`` are not
reported, but your own ``torch.round`` is). Each call that can lose a gradient is kept with
your ``file:line``; at each backward it is checked against the graph of the loss, and
when the block ends every finding gets a severity:

* ``"problem"``: gradient cannot reach something that should be trained. The loss's
  gradient runs into a zero derivative with no way around it, or a trainable tensor got
  no gradient and the watched calls that cut it off are named, each with a fix that keeps
  your estimator; or one term of the loss (the loss is split at its top-level sums, per
  backward) depends on a trained tensor only through cuts (an ``argmin``/``topk`` index, a
  draw, a ``.data`` read, a zero derivative) while another term gives that tensor its
  gradient: a VQ-VAE without its straight-through line, top-k experts mixed with fixed
  gates, a policy term without ``log_prob`` beside an entropy bonus. An explicit
  ``detach()`` is intent and stays a note; a mask beside a gradient path into the same
  term (``x * (x > 0)``) is silent;
* ``"note"``: deliberate stop-gradients (the straight-through detach trick, a VQ loss's
  ``sg[.]``, an RL baseline), draws trained through ``log_prob``, values written through
  ``.data``, and the parameters that a problem reported elsewhere leaves without gradient.

Kinds:

* ``"zero_gradient"``: an op whose derivative is zero almost everywhere: ``round``,
  ``floor``, ``ceil``, ``trunc``, ``sign``, ``heaviside``, and comparisons (``x > 0``,
  ``torch.eq``...), whose bool result has no gradient;
* ``"graph_cut"``: an op whose result cannot carry a gradient back: ``argmax``/``argmin``/
  ``argsort``/``sort``/``topk``/``max(dim)`` indices, integer or bool casts, ``.detach()``,
  ``x.data``, ``.item()``/``.tolist()``/``.numpy()``, ``torch.tensor(...)`` copies of
  tensors, random draws (``torch.bernoulli``,
  ``torch.multinomial``, ``torch.poisson``, ``Tensor.bernoulli_``, a distribution's
  ``.sample()``), a module called under ``torch.no_grad()``;
* ``"no_gradient"``: a tensor that requires grad (a parameter of a module called in the
  block, a tensor made with ``requires_grad=True``, one an optimizer steps) that no
  backward in the block gave a gradient (``grad is None`` or unchanged) or a non-zero one
  (an unexplained all-zero gradient is a note: a zero-initialised layer after it); a
  parameter that backwards give a gradient but that no optimizer stepped in the block
  holds (``hg.nn.quantize_``'s step sizes made after the optimizer); also ``backward()``
  of a tensor that does not require grad, with its cause (a parameter read out through
  NumPy and made a tensor again by ``torch.tensor(...)``: a solver without its wrapper).

Never reported: calls inside a custom ``autograd.Function``'s ``forward``/``backward``
(that is where a surrogate gradient is defined), anything computed under
``torch.no_grad()``/``inference_mode()`` unless it is why a trained tensor got no gradient,
comparisons, indices and casts that cost no trainable tensor its gradient (masks,
accuracy, ``gather`` indices), and ``.item()`` for logging.

Suppress a finding with ``audit(ignore=...)`` (a kind, an op, a ``file:line`` or a file)
or with a comment on its line: ``# hardgrad: ignore`` (everything there) or
``# hardgrad: ignore[graph_cut]`` (a kind or an op, comma-separated).

The watcher only observes: every call runs unchanged, so results are bit-identical, and
the mode and the module and optimizer hooks are removed when the block ends, even when it
raises. When the block is stopped by an exception (``KeyboardInterrupt`` from Ctrl-C
included) the report is still filled with what was seen up to there, and the exception
goes on.

Only the thread that opened the block is watched: forwards, backwards and optimizer steps
run by other threads (a data loader's, another model's) are neither recorded nor judged.
"""

from ._context import audit
from ._report import AuditReport, Finding

__all__ = ["AuditReport", "Finding", "audit"]
