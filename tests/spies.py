"""A spy for tests that ask what a function gave the code under test."""


def record_returns(monkeypatch, owner, name: str) -> list:
    """Replace ``owner.name`` (for the test) by a wrapper that calls it and keeps each value it
    returns: the list returned here, filled as the code under test calls it."""
    returned, real = [], getattr(owner, name)

    def recorded(*args, **kwargs):
        returned.append(real(*args, **kwargs))
        return returned[-1]

    monkeypatch.setattr(owner, name, recorded)
    return returned
