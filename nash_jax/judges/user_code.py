"""Calling a user's judge or reward function: whatever it raises becomes a UserCodeError, which keeps the
user's own frames of the traceback (it is their code to fix) and is located as it travels up (the
iteration, the stage, the prompts), so that the command ends with one line naming the judge and where
the run was. The run itself is resumable as every failure leaves it: fix the function, rerun."""

import traceback


class UserCodeError(Exception):
    def __init__(self, name, error):
        super().__init__(name, error)
        self.name, self.error, self.places = name, error, []

    def located(self, place):
        """This error with `place` (innermost first) added to where it happened; returns itself."""
        self.places.append(place)
        return self

    def user_traceback(self):
        """The traceback of the user's function: its frames and below, none of nash_jax's above it."""
        return "".join(traceback.format_exception(self.error))

    def __str__(self):
        where = f" in {'; '.join(self.places)}" if self.places else ""
        return f"{self.name} raised {type(self.error).__name__}: {self.error}{where}"


def call_user(name, function, *args):
    """function(*args), a user's code named `name` (e.g. "judge.function='my.module:judge'")."""
    try:
        return function(*args)
    except Exception as err:  # noqa: BLE001  (anything a user's code raises is theirs to see)
        # drop this frame: what remains starts at the user's function
        raise UserCodeError(name, err.with_traceback(err.__traceback__.tb_next)) from None


def function_name(function):
    """module:qualname of a callable, for the message when no config key names it."""
    return f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', repr(function))}"
