"""Package discovery across the component folders; metadata lives in pyproject.toml."""

from setuptools import find_packages, setup

COMPONENT_ROOTS = ("trainer_hook", "backend", "frontend", "compose")

packages: list[str] = []
package_dir: dict[str, str] = {}
for root in COMPONENT_ROOTS:
    for package in find_packages(root):
        packages.append(package)
        package_dir[package] = f"{root}/{package.replace('.', '/')}"
# Alembic scripts ship inside the service package so an installed wheel can migrate.
for package, folder in (
    ("rlguard_backend.migrations", "migrations"),
    ("rlguard_backend.migrations.versions", "migrations/versions"),
):
    packages.append(package)
    package_dir[package] = folder

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={
        "rlguard_backend.migrations": ["script.py.mako"],
        "rlguard_frontend": ["assets/*", "plotlyjs/*"],
        "rlguard.integrations": ["wandb_site/sitecustomize.py"],  # not a package: `rlguard watch`
    },
)
