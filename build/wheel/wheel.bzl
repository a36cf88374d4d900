"""`py_wheel_dist`: a reproducible PEP 427 wheel as a Bazel build output."""

def _normalize(name):
    out = name
    for c in ["-", "."]:
        out = out.replace(c, "_")
    return out

def _py_wheel_dist_impl(ctx):
    deps_files = [dep[PyInfo].transitive_sources for dep in ctx.attr.deps]
    data_files = [d[DefaultInfo].files for d in ctx.attr.data]
    inputs = depset(transitive = deps_files + data_files).to_list()

    files = []
    for f in inputs:
        path = f.short_path
        for src_pkg, dst_pkg in ctx.attr.packages.items():
            if path.startswith(src_pkg + "/"):
                files.append([f.path, dst_pkg + path[len(src_pkg):]])
    if not files:
        fail("%s: no source file lies under the packages %s" % (ctx.label, ctx.attr.packages.keys()))

    version = ctx.attr.version
    wheel = ctx.actions.declare_file("%s-%s-%s-%s-%s.whl" % (
        _normalize(ctx.attr.dist_name),
        version,
        ctx.attr.python_tag,
        ctx.attr.abi_tag,
        ctx.attr.platform_tag,
    ))

    entry_points = {}
    for group, spec in ctx.attr.entry_points.items():
        entry_points[group] = {}
        for item in spec.split(","):
            name, _, value = item.partition("=")
            entry_points[group][name.strip()] = value.strip()

    generated = {}
    for path, text in ctx.attr.generated_files.items():
        generated[path] = text.replace("{version}", version).replace("{dist_name}", ctx.attr.dist_name)

    manifest = ctx.actions.declare_file(ctx.label.name + ".manifest.json")
    ctx.actions.write(manifest, struct(
        dist_name = ctx.attr.dist_name,
        version = version,
        summary = ctx.attr.summary,
        license = ctx.attr.license,
        classifiers = ctx.attr.classifiers,
        requires_python = ctx.attr.requires_python,
        requires = [r.replace("{version}", version) for r in ctx.attr.requires],
        python_tag = ctx.attr.python_tag,
        abi_tag = ctx.attr.abi_tag,
        platform_tag = ctx.attr.platform_tag,
        entry_points = entry_points,
        files = sorted(files),
        generated = generated,
        version_file = ctx.file.version_file.path if ctx.file.version_file else "",
        description_file = ctx.file.description_file.path if ctx.file.description_file else "",
    ).to_json())

    extra = [f for f in [ctx.file.version_file, ctx.file.description_file] if f]
    ctx.actions.run(
        executable = ctx.executable._builder,
        arguments = [manifest.path, wheel.path],
        inputs = depset([manifest] + extra, transitive = deps_files + data_files),
        outputs = [wheel],
        mnemonic = "PyWheel",
        progress_message = "Building wheel %s" % wheel.short_path,
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([wheel]))]

py_wheel_dist = rule(
    implementation = _py_wheel_dist_impl,
    doc = "Packages Python sources into a reproducible wheel (see build_wheel.py).",
    attrs = {
        "dist_name": attr.string(mandatory = True, doc = "Distribution name, e.g. jaxcore-cuda12."),
        "version": attr.string(mandatory = True),
        "version_file": attr.label(allow_single_file = [".py"], doc = "A module whose __version__ must equal `version`."),
        "deps": attr.label_list(providers = [PyInfo], doc = "Libraries whose sources are packaged."),
        "data": attr.label_list(allow_files = True, doc = "Extra files (e.g. py.typed) under `packages`."),
        "packages": attr.string_dict(mandatory = True, doc = "Source directory -> package name in the wheel; only files under these are packaged."),
        "generated_files": attr.string_dict(doc = "Path in wheel -> text ({version}, {dist_name} substituted); replaces a packaged file of that path."),
        "requires": attr.string_list(doc = "Requires-Dist lines ({version} substituted)."),
        "requires_python": attr.string(default = ">=3.11"),
        "entry_points": attr.string_dict(doc = "Group -> 'name=module[:attr],...'."),
        "summary": attr.string(mandatory = True),
        "license": attr.string(default = "Apache-2.0"),
        "classifiers": attr.string_list(),
        "description_file": attr.label(allow_single_file = True),
        "python_tag": attr.string(default = "py3"),
        "abi_tag": attr.string(default = "none"),
        "platform_tag": attr.string(default = "any"),
        "_builder": attr.label(default = "//build/wheel:build_wheel", executable = True, cfg = "exec"),
    },
)
