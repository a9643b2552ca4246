# The shop's files are a user's repository, copied out by `make_django_shop`: its own tests run there
# (under its own settings), never as part of acklab's suite.
collect_ignore = ["repo", "fixed"]
