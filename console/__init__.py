"""The read-only evidence console: live (`acklab console`) and as a static snapshot (`acklab pages`).

Layout: `scan`/`index` read and cache the evidence directory; `timeline`, `compare`,
`overview`, `reports` turn documents into what a page shows; `svg` draws the charts;
`views`/`details` render pages through `links` (live routes or relative files); `app` and
`security` serve them; `export` writes the snapshot; `cli` holds the two commands.
Its exception tree, every class in it, is drawn in ``console/errors.py``. Only `evidence`
is imported from the lab.
"""
