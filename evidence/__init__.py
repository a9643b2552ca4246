"""acklab's evidence: schemas, the append-only journal, bundles, GitLab reports (a leaf package).

Public entry points (import the module you need; this file imports nothing):
`evidence.validate` (validate, validate_vendored), `evidence.bundle` (BundleWriter, verify,
find_bundles), `evidence.journal` (Journal), `evidence.merge` (merge), `evidence.pull` (pull),
`evidence.reports.junit` (experiments_junit), `evidence.reports.sast` (bandit_to_sast),
`evidence.reports.codequality` (problems). See evidence/README.md. Its exception tree,
every class in it, is drawn in ``evidence/errors.py``.
"""
