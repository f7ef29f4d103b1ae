"""Maps the three source folders onto one import tree (see design: Layout).

``interfaces/`` -> ``trainspec``, ``reference_impls/`` -> ``trainspec.reference``,
``conformance_tests/`` -> ``trainspec.conformance``, ``bridges/`` -> ``trainspec.bridges``
(adapters to other trainers; optional extras). Subpackages are found automatically;
everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

ROOTS = {
    "trainspec": "interfaces",
    "trainspec.reference": "reference_impls",
    "trainspec.conformance": "conformance_tests",
    "trainspec.bridges": "bridges",
}

packages: list[str] = []
for name, folder in ROOTS.items():
    packages.append(name)
    packages.extend(f"{name}.{sub}" for sub in find_packages(folder))

setup(packages=packages, package_dir=dict(ROOTS))
