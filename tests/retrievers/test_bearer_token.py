"""The bearer token's rule (retrievers/bearer_token.py), the one the server and `remote:` share:
what is refused, in one line naming the variable, with no character, position or length of the
value in it."""

from __future__ import annotations

import pytest

from retrievers.bearer_token import MIN_LENGTH, TokenError, check_strong, read_token

VARIABLE = "R2MED_TEST_TOKEN"
BAD = [  # value, the fault the line names
    ("sécret-token-0123456789", "holds a character that is not ASCII"),
    ("Ösecret-token-0123456789", "holds a character that is not ASCII"),
    ("secret-token-0123456789\n", "starts or ends with whitespace (a line end read from a file?)"),
    (
        "secret-token-0123456789\r\n",
        "starts or ends with whitespace (a line end read from a file?)",
    ),
    (" secret-token-0123456789", "starts or ends with whitespace (a line end read from a file?)"),
    ("   ", "holds only whitespace"),
    ("\n", "holds only whitespace"),
    ("secret token 0123456789", "holds whitespace"),
    ("secret\ttoken0123456789", "holds whitespace"),
    ("secret\x01token0123456789", "holds a control character"),
    ("secret\x7ftoken0123456789", "holds a control character"),
]


@pytest.mark.parametrize(("value", "fault"), BAD)
def test_a_value_that_cannot_be_a_header_is_refused_naming_the_variable_only(
    monkeypatch, value, fault
):
    monkeypatch.setenv(VARIABLE, value)
    with pytest.raises(TokenError) as refused:
        read_token(VARIABLE)
    # the whole line is the variable, the fault and the rule: nothing of the value
    assert str(refused.value) == (
        f"${VARIABLE} {fault}: a bearer token is printable ASCII with no space or line end; "
        "set it again"
    )


def test_the_refusal_holds_no_character_of_a_secret_made_of_unusual_characters(monkeypatch):
    value = "ÖÄÜ§§§¶¶¶ßßß€€€"  # no character of this is in any message the rule writes
    monkeypatch.setenv(VARIABLE, value)
    with pytest.raises(TokenError) as refused:
        read_token(VARIABLE)
    assert set(value) & set(str(refused.value)) == set()
    assert "\\x" not in str(refused.value) and "position" not in str(refused.value)


def test_unset_or_empty_is_no_token_and_a_good_one_is_returned_whole(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    assert read_token(VARIABLE) is None
    monkeypatch.setenv(VARIABLE, "")
    assert read_token(VARIABLE) is None
    good = "A-z_0.9~!#$%&'*+/=?^`|" + "x" * 10
    monkeypatch.setenv(VARIABLE, good)
    assert read_token(VARIABLE) == good


@pytest.mark.parametrize("token", ["x", "abc", "x" * (MIN_LENGTH - 1)])
def test_a_short_token_is_too_weak_off_loopback(token):
    with pytest.raises(TokenError) as refused:
        check_strong(token, VARIABLE, "0.0.0.0")
    line = str(refused.value)
    assert line.startswith(f"${VARIABLE} is too short to guard --host 0.0.0.0")
    assert f"at least {MIN_LENGTH} characters" in line and token not in line


def test_a_token_of_min_length_is_strong_enough():
    check_strong("x" * MIN_LENGTH, VARIABLE, "0.0.0.0")


@pytest.mark.parametrize("token", ["", " ", "tok\n", "tök-0123456789abcdef"])
def test_a_token_given_to_the_server_in_code_follows_the_same_rule(token):
    from retrievers.serve.guard import GuardSettings

    with pytest.raises(TokenError) as refused:
        GuardSettings(token=token, token_env=VARIABLE)
    problem = "holds a character that is not ASCII" if "ö" in token else "holds only whitespace"
    problem = "starts or ends with whitespace (a line end read from a file?)" if "\n" in token \
        else problem  # fmt: skip
    assert str(refused.value) == (f"the server's token (${VARIABLE}) {problem}: a bearer token is "
                                  "printable ASCII with no space or line end")  # fmt: skip
