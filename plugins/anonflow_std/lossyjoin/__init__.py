"""Lossy-join (Anatomy-style) publication: a QI table and an SA table joined on the class id."""
