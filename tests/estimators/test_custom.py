"""User-written ``Estimator`` subclasses: the ones that work, and clear errors (never a bare
``AssertionError``) for the ones that implement too little."""

import pytest
import torch

import hardgrad as hg
from hardgrad.estimators import Estimator, Problem, ScoreFunctionEstimator, attach_gradient


class NotPathwise(Estimator):
    """Declares itself non-pathwise but is no ScoreFunctionEstimator: usable nowhere."""

    pathwise = False

    def categorical(self, logits, noise, dim):
        return logits


class MyReinforce(ScoreFunctionEstimator):
    """A minimal score-function estimator written against the public Problem API."""

    def expectation(self, problem):
        work = problem.work_logits
        samples = problem.sample(problem.num_samples, work)
        values = problem.evaluate(samples)
        f = problem.spread(values.detach().to(work.dtype))
        gradient = (f * problem.score(samples, work)).mean(0)
        return attach_gradient(problem, values.mean(0), gradient)


class MyStraightThrough(Estimator):
    """A minimal pathwise estimator: the sample's value, the identity gradient."""

    def categorical(self, logits, noise, dim):
        sample = hg.one_hot_argmax(logits + noise, dim=dim)
        return logits + (sample - logits).detach()


SAMPLERS = {
    "bernoulli": lambda est: hg.bernoulli(torch.zeros(3), estimator=est),
    "categorical": lambda est: hg.categorical(torch.zeros(3), estimator=est),
}


@pytest.mark.parametrize("sampler", SAMPLERS, ids=str)
def test_a_non_pathwise_subclass_in_a_sampler_says_what_to_implement(sampler):
    with pytest.raises(
        TypeError, match=r"NotPathwise.*pathwise = True.*categorical\(logits, noise, dim\)"
    ):
        SAMPLERS[sampler](NotPathwise())


@pytest.mark.parametrize("dist", ["bernoulli", "categorical"])
def test_a_non_pathwise_subclass_in_expectation_says_what_to_implement(dist):
    # (a bare AssertionError before)
    with pytest.raises(
        TypeError, match=r"`estimator`.*NotPathwise.*ScoreFunctionEstimator.*expectation\(problem\)"
    ):
        hg.expectation(lambda b: b.sum(-1), torch.zeros(3, 2), dist=dist, estimator=NotPathwise())


def test_a_score_function_subclass_cannot_sample_and_says_so():
    with pytest.raises(ValueError, match=r"pathwise `estimator` for hg.bernoulli"):
        hg.bernoulli(torch.zeros(3), estimator=MyReinforce())


def test_custom_score_function_estimator_works_and_matches_the_exact_gradient_in_mean():
    torch.manual_seed(0)
    logits = torch.tensor([0.3, -0.5], dtype=torch.float64, requires_grad=True)
    target = torch.tensor([0.2, 0.9], dtype=torch.float64)
    value = hg.expectation(
        lambda b: (b - target).square().sum(-1),
        logits,
        estimator=MyReinforce(),
        num_samples=200_000,
        generator=torch.Generator().manual_seed(0),
    )
    (gradient,) = torch.autograd.grad(value, logits)
    p = torch.sigmoid(logits.detach())
    exact = p * (1 - p) * (1 - 2 * target)
    # standard error per coordinate below 0.5 / sqrt(2e5) ~ 1.1e-3; 6e-3 is > 5 sigma
    # (false-failure rate < 1e-6; seeded, so deterministic)
    torch.testing.assert_close(gradient, exact, atol=6e-3, rtol=0)


def test_custom_pathwise_estimator_works_in_samplers_and_expectation():
    generator = torch.Generator().manual_seed(0)
    logits = torch.zeros(4, 3, requires_grad=True)
    y = hg.categorical(logits, estimator=MyStraightThrough(), generator=generator)
    assert torch.equal(y.sum(-1), torch.ones(4))
    y.sum().backward()
    assert torch.equal(logits.grad, torch.ones(4, 3))
    value = hg.expectation(
        lambda b: b[..., 0], logits, dist="categorical", estimator=MyStraightThrough()
    )
    assert value.shape == (4,)


def test_problem_prefix_shape_before_evaluate_is_a_clear_error():
    problem = Problem(
        f=lambda b: b,
        logits=torch.zeros(3),
        categorical=False,
        dim=0,
        num_samples=1,
        generator=None,
    )
    with pytest.raises(RuntimeError, match=r"evaluate"):
        _ = problem.prefix_shape
    with pytest.raises(RuntimeError, match=r"probs="):
        problem.probability(torch.zeros(1, 3))
