import os
import tempfile

# Before the app is imported: its database and its secret come from the environment.
os.environ["SHOP_DATABASE_URL"] = f"sqlite:///{tempfile.mkdtemp(prefix='flask-shop-tests-')}/shop.db"
os.environ["SHOP_WEBHOOK_SECRET"] = "whsec_" + "dGVzdC1zZWNyZXQtZm9yLWZsYXNrLXNob3A="
