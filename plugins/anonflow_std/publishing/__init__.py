"""Publishing: the plain publishers (csv, parquet, postgres, lossy-join) and the release
publisher, built on the release format (:mod:`.manifest`, the bottom module: the manifest, its
integrity and its files), with its signatures, report page, checks, ``anonflow verify`` (on the
files alone: :mod:`.audit`; re-run: :mod:`.verify`, :mod:`.rerun_compare`, the pinned files of
:mod:`.release_files`) and ``anonflow apply`` (:mod:`.release_apply`)."""
