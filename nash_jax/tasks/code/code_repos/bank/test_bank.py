import pytest

from bank import Account, InsufficientFunds, transfer


def test_opening_balance():
    assert Account("ada").balance == 0
    assert Account("ada", 50).balance == 50


def test_negative_opening_balance():
    with pytest.raises(ValueError):
        Account("ada", -1)


def test_deposit_and_withdraw():
    account = Account("ada", 10)
    account.deposit(5)
    account.withdraw(12)
    assert account.balance == 3


def test_withdraw_everything():
    account = Account("ada", 10)
    account.withdraw(10)
    assert account.balance == 0


def test_overdraft_refused():
    account = Account("ada", 10)
    with pytest.raises(InsufficientFunds):
        account.withdraw(11)
    assert account.balance == 10


def test_non_positive_amounts_refused():
    account = Account("ada", 10)
    for bad in (0, -5):
        with pytest.raises(ValueError):
            account.deposit(bad)
        with pytest.raises(ValueError):
            account.withdraw(bad)


def test_history_and_totals():
    account = Account("ada")
    account.deposit(7)
    account.deposit(3)
    account.withdraw(4)
    assert account.history == [("deposit", 7), ("deposit", 3), ("withdraw", 4)]
    assert account.total("deposit") == 10
    assert account.total("withdraw") == 4


def test_transfer():
    a, b = Account("a", 20), Account("b", 5)
    transfer(a, b, 15)
    assert (a.balance, b.balance) == (5, 20)


def test_failed_transfer_changes_nothing():
    a, b = Account("a", 20), Account("b", 5)
    with pytest.raises(InsufficientFunds):
        transfer(a, b, 21)
    assert (a.balance, b.balance) == (20, 5)
