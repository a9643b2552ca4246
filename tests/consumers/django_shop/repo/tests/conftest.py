"""The shop's tests under pytest-django: its test database, its locmem mail outbox."""

import pytest

SECRET = "whsec_shop_tests_0123456789"


@pytest.fixture(autouse=True)
def stripe_secret(settings):
    settings.STRIPE_WEBHOOK_SECRET = SECRET
