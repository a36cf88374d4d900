"""`plugin_wheel`: a backend plugin wheel built from a plugin source tree."""

load("//build/wheel:wheel.bzl", "py_wheel_dist")
load("//jaxcore:version.bzl", "JAXCORE_VERSION")

# The plugin's source tree ships under a per-backend package name; its _build_config.py is
# replaced by one naming the wheel's single platform.
_BUILD_CONFIG = '''"""Generated when the {dist_name} wheel was built; do not edit."""

PLATFORMS = ({platforms})
VERSION = "{version}"
DIST_NAME = "{dist_name}"
'''

def plugin_wheel(name, dist_name, src, package, platform, summary, deps, classifiers = []):
    """A wheel of plugin sources `src` shipped as `package`, registered for `platform`."""
    py_wheel_dist(
        name = name,
        dist_name = dist_name,
        version = JAXCORE_VERSION,
        summary = summary,
        classifiers = classifiers,
        deps = deps,
        packages = {src: package},
        generated_files = {
            package + "/_build_config.py": _BUILD_CONFIG.replace("{platforms}", '"%s",' % platform),
            package + "/py.typed": "",
        },
        requires = ["jaxcore=={version}"],
        entry_points = {"jaxcore_plugins": "%s=%s" % (platform, package)},
    )

