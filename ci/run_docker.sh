#!/usr/bin/env bash
# Re-runs one jaxcore CI job inside the CI container image, with one command.
#
#   ci/run_docker.sh [--backend cpu|cuda|rocm] [--engine docker|podman]
#                    [--base-from-debootstrap] [--host-ca[=BUNDLE]] [--rebuild]
#                    -- <ci/ script> [script args...]
#
# It builds docker/Dockerfile.<backend> (or reuses the image already built from the same
# Dockerfile, lock file and base image), mounts the repository at the same path it has here,
# forwards JAXCORE_* / JAX_* variables through an env file, adds the GPU devices the backend
# needs, runs the given ci/ script inside and exits with that script's exit code.
#
# Options:
#   --backend B              cpu (default), cuda or rocm.
#   --engine E               docker or podman. Default: docker when its engine answers,
#                            otherwise podman.
#   --base-from-debootstrap  (cpu only) build the Debian bookworm base image locally with
#                            debootstrap + "<engine> import" instead of pulling it from a
#                            registry. Needs root and debootstrap.
#   --host-ca[=BUNDLE]       pass the host's CA bundle into the image build and the run (for
#                            networks that intercept TLS; pip needs it then). BUNDLE
#                            defaults to the system bundle (e.g. /etc/ssl/certs/ca-certificates.crt).
#   --rebuild                build the image even when one with the same key exists.
#   -h, --help               print this help.
#
# Environment (JAXCORE_DOCKER_* configure this script and are not forwarded):
#   JAXCORE_DOCKER_DEV_DIR            where to look for GPU device nodes (default /dev).
#   JAXCORE_DOCKER_DEBIAN_MIRROR      Debian mirror for --base-from-debootstrap and the
#                                     image's apt (default http://deb.debian.org/debian).
#
# Exit status: the ci/ script's own status; 2 when the request cannot be run (bad arguments,
# no engine, no GPU devices, missing tools); 1 when building an image fails.
set -euo pipefail

readonly PROG="ci/run_docker.sh"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
readonly REPO_ROOT
readonly LOCK_FILE="build/requirements_lock.txt"
# The CPU image also holds the newest-end venv (Python 3.13, ci/run_pytest_newest.sh).
readonly NEWEST_LOCK_FILE="build/requirements_lock_3_13.txt"
# Variables that name host toolchain locations: the image sets its own, so these are not
# forwarded (a host path such as .venv/bin/python does not exist inside the container).
readonly NOT_FORWARDED="JAXCORE_PYTHON JAXCORE_BAZEL JAXCORE_VENV JAXCORE_NEWEST_VENV"

die() {
  echo "${PROG}: error: $*" >&2
  exit 2
}

note() {
  echo "${PROG}: $*" >&2
}

usage() {
  sed -n '2,/^set -euo pipefail/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
}

# ---- arguments --------------------------------------------------------------------------
backend="cpu"
engine=""
from_debootstrap=0
host_ca=""
use_host_ca=0
rebuild=0
script=""
script_args=()

while (($#)); do
  case "$1" in
    --backend) (($# >= 2)) || die "--backend needs a value (cpu, cuda or rocm)"; backend="$2"; shift 2 ;;
    --backend=*) backend="${1#*=}"; shift ;;
    --engine) (($# >= 2)) || die "--engine needs a value (docker or podman)"; engine="$2"; shift 2 ;;
    --engine=*) engine="${1#*=}"; shift ;;
    --base-from-debootstrap) from_debootstrap=1; shift ;;
    --host-ca) use_host_ca=1; shift ;;
    --host-ca=*) use_host_ca=1; host_ca="${1#*=}"; shift ;;
    --rebuild) rebuild=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) die "unknown option '$1' (the ci/ script goes after '--'; see --help)" ;;
  esac
done

case "${backend}" in
  cpu | cuda | rocm) ;;
  *) die "unknown backend '${backend}': choose cpu, cuda or rocm" ;;
esac
case "${engine}" in
  "" | docker | podman) ;;
  *) die "unknown engine '${engine}': choose docker or podman" ;;
esac
if ((from_debootstrap)) && [[ "${backend}" != "cpu" ]]; then
  die "--base-from-debootstrap builds a Debian base image and only applies to --backend cpu, not '${backend}'"
fi

(($# >= 1)) || die "no CI script given: usage: ${PROG} [options] -- ci/<script>.sh [args]"
script="$1"
shift
script_args=("$@")

# The script must be one of the repository's ci/ scripts: it runs from the mounted tree.
script_rel="${script#"${REPO_ROOT}"/}"
script_rel="${script_rel#./}"
if [[ "${script_rel}" != ci/* || "${script_rel}" == */../* || "${script_rel}" == ci/../* ]]; then
  die "'${script}' is not a script under ci/ (e.g. ci/run_pytest_cpu.sh)"
fi
[[ -f "${REPO_ROOT}/${script_rel}" ]] || die "CI script '${script_rel}' does not exist in ${REPO_ROOT}"
[[ "${script_rel}" != "ci/run_docker.sh" ]] || die "ci/run_docker.sh cannot run itself inside the container"

# ---- GPU devices ------------------------------------------------------------------------
dev_dir="${JAXCORE_DOCKER_DEV_DIR:-/dev}"
gpu_flags=()
case "${backend}" in
  cuda)
    if [[ ! -e "${dev_dir}/nvidiactl" && ! -e "${dev_dir}/nvidia0" ]]; then
      die "--backend cuda needs an NVIDIA GPU, but there is no ${dev_dir}/nvidiactl or ${dev_dir}/nvidia0 on this machine"
    fi
    ;;
  rocm)
    missing=()
    [[ -e "${dev_dir}/kfd" ]] || missing+=("${dev_dir}/kfd")
    [[ -e "${dev_dir}/dri" ]] || missing+=("${dev_dir}/dri")
    if ((${#missing[@]})); then
      die "--backend rocm needs an AMD GPU, but ${missing[*]} is missing on this machine"
    fi
    gpu_flags=(--device=/dev/kfd --device=/dev/dri --group-add video --shm-size 16G)
    ;;
esac

# ---- container engine -------------------------------------------------------------------
engine_answers() {
  "$1" info >/dev/null 2>&1
}

if [[ -z "${engine}" ]]; then
  if command -v docker >/dev/null 2>&1 && engine_answers docker; then
    engine="docker"
  elif command -v podman >/dev/null 2>&1; then
    engine="podman"
  elif command -v docker >/dev/null 2>&1; then
    die "no container engine: the docker CLI is installed but no Docker engine answers ('docker info' fails), and podman is not installed (Debian/Ubuntu: apt-get install podman runc)"
  else
    die "no container engine: neither docker nor podman is installed (Debian/Ubuntu: apt-get install podman runc)"
  fi
fi
command -v "${engine}" >/dev/null 2>&1 || die "--engine ${engine}: '${engine}' is not installed"
if ! engine_answers "${engine}"; then
  die "--engine ${engine}: '${engine} info' fails, so no ${engine} engine is usable here"
fi

engine_build_flags=()
engine_run_flags=()
if [[ "${engine}" == "podman" ]]; then
  # Podman writes OCI images by default, which drop the Dockerfile's SHELL (bash with
  # -euo pipefail); the docker format keeps it.
  engine_build_flags=(--format docker)
  # Podman's default limits for root (nofile 1048576, nproc 32768) can exceed what runc may
  # set in a VM or nested container ("error setting rlimit ... operation not permitted");
  # stay within the host's own limits instead.
  nofile="$(ulimit -Hn)"
  nproc="$(ulimit -Hu)"
  [[ "${nofile}" == "unlimited" || "${nofile}" -gt 65536 ]] && nofile=65536
  [[ "${nproc}" == "unlimited" || "${nproc}" -gt 16384 ]] && nproc=16384
  engine_run_flags=(--ulimit "nofile=${nofile}:${nofile}" --ulimit "nproc=${nproc}:${nproc}")
fi

if [[ "${backend}" == "cuda" ]]; then
  if [[ "${engine}" == "docker" ]]; then
    gpu_flags=(--gpus all)
  else
    # Podman has no --gpus: it reaches NVIDIA GPUs through the CDI spec that
    # nvidia-ctk cdi generate writes.
    gpu_flags=(--device nvidia.com/gpu=all)
  fi
fi

# ---- CA bundle --------------------------------------------------------------------------
if ((use_host_ca)); then
  if [[ -z "${host_ca}" ]]; then
    for candidate in "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt \
        /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
      if [[ -n "${candidate}" && -s "${candidate}" ]]; then
        host_ca="${candidate}"
        break
      fi
    done
    [[ -n "${host_ca}" ]] || die "--host-ca: no CA bundle found on this machine; give one with --host-ca=PATH"
  fi
  [[ -s "${host_ca}" ]] || die "--host-ca: CA bundle '${host_ca}' does not exist or is empty"
  host_ca="$(cd "$(dirname "${host_ca}")" && pwd -P)/$(basename "${host_ca}")"
fi

# ---- inputs of the image ----------------------------------------------------------------
dockerfile="${REPO_ROOT}/docker/Dockerfile.${backend}"
[[ -f "${dockerfile}" ]] || die "${dockerfile} does not exist"
# The lock files the image installs, copied into the build context under their own names.
lock_files=("${LOCK_FILE}")
if [[ "${backend}" == "cpu" ]]; then
  lock_files+=("${NEWEST_LOCK_FILE}")
fi
for lock in "${lock_files[@]}"; do
  [[ -f "${REPO_ROOT}/${lock}" ]] || die "${lock} does not exist: the image installs the locked requirements from it"
done

sha256_of() {
  sha256sum | cut -c1-16
}

tmp_dir="$(mktemp -d "${TMPDIR:-/tmp}/jaxcore-run-docker.XXXXXX")"
saved_dir="${tmp_dir}/host-files"
mkdir -p "${saved_dir}"
saving=0

# Paths in the checkout that `build.py setup` and Bazel rewrite for the container's own
# locations (the generated bazelrc names the container's Python; bazel-* point into the
# container's output base). The host's versions are put back after the run.
host_owned_paths() {
  local path
  for path in "${REPO_ROOT}/.jaxcore_configure.bazelrc" "${REPO_ROOT}"/bazel-*; do
    if [[ -L "${path}" || -f "${path}" ]]; then
      echo "${path##*/}"
    fi
  done
}

save_host_files() {
  local name
  host_owned_paths >"${saved_dir}.list"
  while IFS= read -r name; do
    cp -a "${REPO_ROOT}/${name}" "${saved_dir}/${name}"
  done <"${saved_dir}.list"
  saving=1
}

# shellcheck disable=SC2317,SC2329  # reached through cleanup, the EXIT trap (0.9 calls it SC2317)
restore_host_files() {
  local name
  while IFS= read -r name; do
    if [[ ! -e "${saved_dir}/${name}" && ! -L "${saved_dir}/${name}" ]]; then
      rm -f "${REPO_ROOT:?}/${name}"
    fi
  done < <(host_owned_paths)
  while IFS= read -r name; do
    rm -f "${REPO_ROOT:?}/${name}"
    cp -a "${saved_dir}/${name}" "${REPO_ROOT}/${name}"
  done <"${saved_dir}.list"
}

# shellcheck disable=SC2317,SC2329  # the EXIT trap (0.9 calls it SC2317)
cleanup() {
  if ((saving)); then
    restore_host_files || note "could not restore the host's .jaxcore_configure.bazelrc / bazel-* links; rerun build/build.py setup"
  fi
  rm -rf "${tmp_dir}"
}
trap cleanup EXIT

image_exists() {
  if [[ "${engine}" == "podman" ]]; then
    podman image exists "$1" >/dev/null 2>&1
  else
    docker image inspect "$1" >/dev/null 2>&1
  fi
}

# Builds a Debian bookworm root file system with debootstrap and imports it as an image, for
# machines where the registry base image cannot be pulled. Prints the image reference.
debootstrap_base() {
  local mirror="${JAXCORE_DOCKER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
  local key
  key="$(printf 'debootstrap minbase bookworm %s\n' "${mirror}" | sha256_of)"
  local ref="localhost/jaxcore-debian-bookworm:debootstrap-${key}"
  if ((!rebuild)) && image_exists "${ref}"; then
    note "reusing base image ${ref}"
    echo "${ref}"
    return
  fi
  local debootstrap_bin
  debootstrap_bin="$(command -v debootstrap || true)"
  [[ -n "${debootstrap_bin}" ]] || die "--base-from-debootstrap needs debootstrap, which is not installed (Debian/Ubuntu: apt-get install debootstrap)"
  [[ "$(id -u)" == "0" ]] || die "--base-from-debootstrap needs root: debootstrap creates device nodes and files owned by other users"
  note "bootstrapping Debian bookworm from ${mirror} (a few minutes)"
  local rootfs="${tmp_dir}/rootfs"
  if ! "${debootstrap_bin}" --variant=minbase bookworm "${rootfs}" "${mirror}" >"${tmp_dir}/debootstrap.log" 2>&1; then
    tail -n 20 "${tmp_dir}/debootstrap.log" >&2
    echo "${PROG}: error: debootstrap of bookworm from ${mirror} failed (log above)" >&2
    exit 1
  fi
  rm -rf "${rootfs}/var/cache/apt/archives/"*.deb "${rootfs}/var/lib/apt/lists/"*
  if ! tar --numeric-owner -C "${rootfs}" -c . |
      "${engine}" import --change 'CMD ["/bin/bash"]' - "${ref}" >/dev/null; then
    echo "${PROG}: error: '${engine} import' of the bootstrapped bookworm file system failed" >&2
    exit 1
  fi
  rm -rf "${rootfs}"
  echo "${ref}"
}

build_args=()
base_ref=""
if ((from_debootstrap)); then
  base_ref="$(debootstrap_base)"
  build_args+=(--build-arg "BASE_IMAGE=${base_ref}")
fi
if [[ -n "${JAXCORE_DOCKER_DEBIAN_MIRROR:-}" ]]; then
  build_args+=(--build-arg "DEBIAN_MIRROR=${JAXCORE_DOCKER_DEBIAN_MIRROR}")
fi

# The image is keyed by what determines its content: the Dockerfile, the lock files and the
# base image replacing the Dockerfile's default (if any).
image_key="$({
  cat "${dockerfile}"
  for lock in "${lock_files[@]}"; do
    cat "${REPO_ROOT}/${lock}"
  done
  printf 'base=%s\n' "${base_ref}"
} | sha256_of)"
image="localhost/jaxcore-ci-${backend}:${image_key}"

if ((!rebuild)) && image_exists "${image}"; then
  note "reusing image ${image}"
else
  context="${tmp_dir}/context"
  mkdir -p "${context}/host-ca"
  for lock in "${lock_files[@]}"; do
    cp "${REPO_ROOT}/${lock}" "${context}/${lock##*/}"
  done
  if ((use_host_ca)); then
    cp "${host_ca}" "${context}/host-ca/ca-bundle.pem"
  fi
  note "building ${image} from docker/Dockerfile.${backend}"
  if ! "${engine}" build "${engine_build_flags[@]}" -f "${dockerfile}" -t "${image}" \
      --label "org.jaxcore.ci.key=${image_key}" "${build_args[@]}" "${context}"; then
    hint=""
    if [[ "${backend}" == "cpu" ]] && ((!from_debootstrap)); then
      hint="; if the base image cannot be pulled here, add --base-from-debootstrap"
    fi
    if ((!use_host_ca)); then
      hint+="; if downloads fail TLS verification, add --host-ca"
    fi
    echo "${PROG}: error: building ${image} from docker/Dockerfile.${backend} failed (output above)${hint}" >&2
    exit 1
  fi
fi

# ---- run --------------------------------------------------------------------------------
env_file="${tmp_dir}/env"
: >"${env_file}"
while IFS= read -r name; do
  case " ${NOT_FORWARDED} " in
    *" ${name} "*) note "not forwarding ${name} (a host path; the image sets its own)"; continue ;;
  esac
  [[ "${name}" != JAXCORE_DOCKER_* ]] || continue  # this script's own settings
  value="${!name}"
  if [[ "${value}" == *$'\n'* ]]; then
    note "not forwarding ${name}: its value spans several lines, which an env file cannot hold"
    continue
  fi
  printf '%s=%s\n' "${name}" "${value}" >>"${env_file}"
done < <(compgen -e | grep -E '^(JAXCORE|JAX)_' || true)

# The repository sits at the same path as here, so paths in logs and Bazel output match the
# host's; Bazel's cache lives in a volume per backend, so re-runs build incrementally.
run_flags=("${engine_run_flags[@]}" --rm --env-file "${env_file}"
  -v "${REPO_ROOT}:${REPO_ROOT}" -w "${REPO_ROOT}"
  -v "jaxcore-bazel-cache-${backend}:/root/.cache/bazel")
if [[ -t 0 && -t 1 ]]; then
  run_flags+=(-it)
fi
if ((use_host_ca)); then
  run_flags+=(-v "${host_ca}:/etc/jaxcore/host-ca.pem:ro"
    -e PIP_CERT=/etc/jaxcore/host-ca.pem
    -e SSL_CERT_FILE=/etc/jaxcore/host-ca.pem
    -e REQUESTS_CA_BUNDLE=/etc/jaxcore/host-ca.pem)
fi

note "running ${script_rel} ${script_args[*]} in ${image}"
save_host_files
set +e
"${engine}" run "${run_flags[@]}" "${gpu_flags[@]}" "${image}" \
  bash "${script_rel}" "${script_args[@]}"
status=$?
set -e
exit "${status}"
