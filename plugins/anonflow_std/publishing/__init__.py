"""Publishing: the plain publishers, the release publisher with its report page, the checks a release
runs and ``anonflow verify``."""
