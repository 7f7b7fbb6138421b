"""KernLoop: a spec in, a faster kernel out, proven by a judge that hostile candidates cannot fool."""


def apply(model, model_dir):
    """The model with each verified, faster card kernel of `model` --run's folder behind a guard
    (kernloop/model/apply.py); changed in place and returned."""
    from kernloop.model.apply import apply as _apply
    return _apply(model, model_dir)


def unapply(model):
    """The model as it was before `apply`."""
    from kernloop.model.apply import unapply as _unapply
    return _unapply(model)
