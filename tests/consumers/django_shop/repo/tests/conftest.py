"""The shop's tests under plain pytest: Django's test environment on a database of their own."""

import os
import tempfile

import django
import pytest

SECRET = "whsec_shop_tests_0123456789"


def pytest_configure(config):
    # Before any test module imports the models: settings read the environment once.
    os.environ["SHOP_DB"] = os.path.join(tempfile.mkdtemp(prefix="shop-tests-"), "shop.sqlite3")
    os.environ["STRIPE_WEBHOOK_SECRET"] = SECRET
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    django.setup()


@pytest.fixture(scope="session", autouse=True)
def django_environment():
    from django.core.management import call_command
    from django.test.utils import setup_test_environment, teardown_test_environment

    setup_test_environment()  # mail goes to django.core.mail.outbox
    call_command("migrate", verbosity=0)
    yield
    teardown_test_environment()


@pytest.fixture(autouse=True)
def clean(django_environment):
    from django.core import mail

    from orders.models import Fulfillment

    Fulfillment.objects.all().delete()
    mail.outbox.clear()
