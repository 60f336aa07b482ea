"""A bank account that keeps its history and refuses overdrafts."""


class InsufficientFunds(Exception):
    pass


class Account:
    def __init__(self, owner, balance=0):
        if balance < 0:
            raise ValueError("an account cannot open with a negative balance")
        self.owner = owner
        self.balance = balance
        self.history = []

    def deposit(self, amount):
        if amount <= 0:
            raise ValueError(f"deposit of {amount}: amounts must be positive")
        self.balance += amount
        self.history.append(("deposit", amount))

    def withdraw(self, amount):
        if amount <= 0:
            raise ValueError(f"withdrawal of {amount}: amounts must be positive")
        if amount > self.balance:
            raise InsufficientFunds(f"{self.owner} has {self.balance}, asked for {amount}")
        self.balance -= amount
        self.history.append(("withdraw", amount))

    def total(self, kind):
        """The sum of all movements of one kind ("deposit" or "withdraw")."""
        return sum(amount for what, amount in self.history if what == kind)


def transfer(source, target, amount):
    """Move `amount` between accounts; nothing changes when the source cannot pay."""
    source.withdraw(amount)
    target.deposit(amount)
