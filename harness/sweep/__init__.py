"""The sweep: the target x database x experiment matrix as ordinary runs inside one bundle,
resumable, with an index and a heatmap (``acklab sweep``).
"""
