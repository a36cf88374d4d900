"""`plugin_wheel`: a backend plugin wheel built from a plugin source tree."""

load("//build/wheel:wheel.bzl", "py_wheel_dist")
load("//jaxcore:version.bzl", "JAXCORE_VERSION", "JAXLIB_REQUIREMENT")

# The plugin's source tree ships under a per-backend package name; its _build_config.py is
# replaced by one naming the wheel's single platform.
_BUILD_CONFIG = '''"""Generated when the {dist_name} wheel was built; do not edit."""

PLATFORMS = ("%s",)
VERSION = "{version}"
DIST_NAME = "{dist_name}"
'''

def _attrs(dist_name, src, package, platform):
    return struct(
        dist_name = dist_name,
        packages = {src: package},
        generated_files = {
            package + "/_build_config.py": _BUILD_CONFIG % platform,
            package + "/py.typed": "",
        },
        entry_points = {"jaxcore_plugins": "%s=%s" % (platform, package)},
    )

def _pick(default, cases, field):
    if not cases:
        return getattr(default, field)
    branches = {k: getattr(c, field) for k, c in cases.items()}
    branches["//conditions:default"] = getattr(default, field)
    return select(branches)

def plugin_wheel(
        name,
        dist_name,
        src,
        package,
        platform,
        summary,
        classifiers = [],
        variants = None,
        data = [],
        platform_tag = "any"):
    """A wheel of plugin sources `src` shipped as `package`, registered for `platform`.

    Args:
      name: target name.
      dist_name: distribution name, e.g. jaxcore-rocm6.
      src: the plugin's source package (e.g. jaxcore_gpu); its py_library `//<src>` is packaged.
      package: the package name inside the wheel.
      platform: the one JAX platform this wheel registers kernels for.
      summary: one-line description.
      classifiers: trove classifiers.
      variants: optional {config_setting label: (dist_name, package)} chosen by select(),
        e.g. the CUDA major version; the default case uses dist_name/package.
      data: extra files under `src` to ship, e.g. a native library built from it.
      platform_tag: the wheel's platform tag; "any" for pure Python, a manylinux/linux tag
        for a wheel with native code (the builder checks the binaries against it).
    """
    default = _attrs(dist_name, src, package, platform)
    cases = {k: _attrs(v[0], src, v[1], platform) for k, v in (variants or {}).items()}
    py_wheel_dist(
        name = name,
        dist_name = _pick(default, cases, "dist_name"),
        version = JAXCORE_VERSION,
        summary = summary,
        classifiers = classifiers,
        deps = ["//" + src],
        data = data,
        platform_tag = platform_tag,
        packages = _pick(default, cases, "packages"),
        generated_files = _pick(default, cases, "generated_files"),
        # The same jaxcore, and a jaxlib in the tested range (the kernels lower through it).
        requires = ["jaxcore=={version}", JAXLIB_REQUIREMENT],
        entry_points = _pick(default, cases, "entry_points"),
    )
