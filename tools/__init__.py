"""Developer tools of the repository (not shipped): the generated parts of the docs and the
documentation site's hooks."""
