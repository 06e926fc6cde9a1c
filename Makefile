# guestcluster developer entry points. `make test` and `make demo` install or build what they need.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: all build test lint fmt crds external-crds controlplane kubevirt cdi helm deps demo dev-up clean-cache bench bench-disk bench-scale bench-observability

all: build

build:
	$(CARGO) build --workspace

## The embedded control plane (etcd, kube-apiserver, kube-controller-manager, kubectl), built once
## per machine from pinned Go modules into ~/.cache/guestcluster.
controlplane:
	tools/controlplane/build.sh

## KubeVirt's control plane (virt-controller, virt-api) and the dump of virt-operator's install
## strategy, built once per machine from the kubevirt.io/kubevirt release pinned in tools/kubevirt
## into ~/.cache/guestcluster (the tests and the demo run them; docs/simulation.md).
kubevirt:
	tools/kubevirt/build.sh

## CDI's API server (cdi-apiserver: its admission webhooks) and the dump of what cdi-operator
## installs, built once per machine from the release pinned in tools/cdi into
## ~/.cache/guestcluster (the tests and the demo run it; tools/cdi/README.md).
cdi:
	tools/cdi/build.sh

## helm, built once per machine from the Go module pinned in tools/helm into ~/.cache/guestcluster
## (the tests lint, render and install the chart helm/guestcluster-operator with it).
helm:
	tools/helm/build.sh

## System packages the tests and demo need (qemu-img; headless Chromium for the dashboard test),
## installed with apt when missing.
deps:
	tools/ensure-deps.sh

## Regenerate the CRDs (also the chart's copy) and the API reference from src/api (committed;
## tests fail on drift).
crds:
	$(CARGO) run --quiet -p guestcluster -- crdgen --out-dir crds --api-docs docs/api.md
	cp crds/*.yaml helm/guestcluster-operator/crds/

## Regenerate the test control plane's CRDs of the external kinds (KubeVirt, CDI, OpenShift, HCO)
## from the upstream Go API types pinned in tools/external-crds/go.mod (committed; tests fail on
## drift). The generator is built once per machine into ~/.cache/guestcluster.
external-crds:
	tools/external-crds/generate.sh

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## Everything CI runs, for the whole workspace (the product and its test crates `testenv` and
## `sim`): format and lint checks, generated-file drift checks, unit, control-plane and scenario
## tests. tools/test-lanes.sh runs the longest scenario binaries beside the rest.
test: deps controlplane kubevirt cdi helm lint
	CARGO=$(CARGO) tools/test-lanes.sh

## Criterion benchmarks (benches/): per-reconcile decision cost at scale, with same-run baselines to
## state results as ratios. Needs no control plane. Pass a filter with BENCH_ARGS="pool_decide".
bench:
	$(CARGO) bench --bench decisions -- $(BENCH_ARGS)

## The operator (release build) against 100 and 1000 ClusterInstances in 20 pools and 20 bundles on
## the embedded control plane: time until every object has a status, peak and steady RSS, idle API
## requests per second above the cluster's own rate, requests by verb and resource
## (docs/performance.md). Other sizes: BENCH_ARGS="--instances 500 --pools 10"; every waiting
## state (platform absent, namespace not enabled, …): BENCH_ARGS="--state all".
bench-scale: controlplane
	$(CARGO) bench --bench scale -- $(BENCH_ARGS)

## The disk Job's one-pass sparse copy and hash of a multi-GiB raw image against hashing it alone
## and against cp --sparse=always + sha256sum, and its allocation against the source's
## (docs/performance.md). Other sizes: BENCH_ARGS="--gib 8 --rounds 5".
bench-disk:
	$(CARGO) bench --bench disk_copy -- $(BENCH_ARGS)

## What observing costs: 1000 messages through an actor counted for the mailbox-depth gauge
## against ractor's plain cast, and /dashboard rendered for 10, 100 and 1000 instances against
## serializing them (docs/performance.md).
bench-observability:
	$(CARGO) bench --bench observability -- $(BENCH_ARGS)

## The whole flow on an embedded control plane with progress output. Per-request error logs of
## kube clients are off (the operator's guest API probes fail by design until a guest is up; the
## outcome is in the progress lines); set RUST_LOG to see them.
## The simulation's binary (`guestcluster-sim`) runs the flow; the Jobs' pods run the product
## binary, built first into the same target directory, where the simulation looks for it.
demo: deps controlplane kubevirt cdi
	$(CARGO) build --quiet -p guestcluster
	RUST_LOG="$${RUST_LOG:-warn,kube_client::client::builder=off}" $(CARGO) run --quiet -p guestcluster-sim -- demo

## A control plane with our CRDs for poking at by hand; prints the kubeconfig path.
dev-up: controlplane
	$(CARGO) run --quiet -p guestcluster-sim -- dev up

clean-cache:
	rm -rf $${XDG_CACHE_HOME:-$$HOME/.cache}/guestcluster
