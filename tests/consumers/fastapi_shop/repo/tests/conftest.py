import os
import tempfile

os.environ["SHOP_DB_URL"] = f"sqlite:///{tempfile.mkdtemp(prefix='fastapi-shop-tests-')}/orders.db"
os.environ["SHOPIFY_WEBHOOK_SECRET"] = "shpss_tests_0123456789abcdef"
