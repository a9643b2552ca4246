"""GitLab report formats written into a bundle's `reports/` directory.

- `junit`: JUnit XML from the experiments (one testcase per target x experiment).
- `sast`: bandit's JSON converted to GitLab's SAST report format (schema 15.2.1).
- `codequality`: a checker of GitLab's Code Quality fields (ruff writes the report itself
  with ``ruff check --output-format=gitlab``).
"""
