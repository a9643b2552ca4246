"""Small webhook apps as users write them; the plugin's tests copy them into user suites (pytester)."""
