"""What the first-party plugin families share: the columns a method reads and the policies
every family applies to them (:mod:`.columns`), and the algorithm kernels of SPEC sections
1-2 -- attribute encodings (:mod:`.encode`), code hierarchy trees (:mod:`.cht`), record
distances and centroids (:mod:`.distance`) and generalized values (:mod:`.generalized`).
A family imports another family's code only through this package."""
