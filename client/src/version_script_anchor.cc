// libkvtier.so is built from kvtier_client's objects; CMake needs one source of its own for the
// shared library target. This one defines nothing.
