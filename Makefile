# The two README commands: `make demo` (set up, run the main job) and `make test` (set up, run the tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test lint setup tools kafka clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "strom needs Python 3.11+; set PYTHON=python3.11 (or newer)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]' -c constraints.txt
	@touch $@

demo: $(STAMP)
	$(BIN)/strom demo

# $(call apt_install,<packages>): installs Debian packages, refreshing the index once if it is stale.
apt_install = { $(SUDO) apt-get install -y -qq $(1) >/dev/null \
  || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $(1) >/dev/null; }; }

# kcat is a real third-party Kafka client the broker tests use as a judge; Graphviz's dot draws
# `strom streams describe --format svg` (tests/cli/test_streams_describe.py); iptables cuts and slows the
# links between the fault tests' network namespaces (tests/support/hosts.py; Linux only).
tools:
	@command -v kcat >/dev/null || $(call apt_install,kcat) \
	  || { echo "The broker tests need kcat: install it (apt-get install kcat, brew install kcat)."; exit 1; }
	@command -v dot >/dev/null || $(call apt_install,graphviz) \
	  || { echo "The CLI tests need Graphviz: install it (apt-get install graphviz, brew install graphviz)."; \
	       exit 1; }
	@command -v iptables >/dev/null || [ "$$(uname)" != Linux ] || $(call apt_install,iptables) \
	  || { echo "The fault tests need iptables: install it (apt-get install iptables)."; exit 1; }

# Apache Kafka's own jars (broker, controller, tools) for the tests that run strom against a real Kafka
# cluster: Maven copies them from Maven Central once into an ignored cache (tests/support/apache_kafka.py).
KAFKA_POM := tests/support/maven/apache-kafka/pom.xml
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' $(KAFKA_POM))
KAFKA_LIBS := .cache/apache-kafka/$(KAFKA_VERSION)/libs
KAFKA_STAMP := $(KAFKA_LIBS)/.complete

kafka: $(KAFKA_STAMP)

$(KAFKA_STAMP): $(KAFKA_POM)
	@command -v java >/dev/null || { echo "Apache Kafka (a test component) needs Java 17+: install a JDK (apt-get install openjdk-17-jdk-headless)."; exit 1; }
	@command -v mvn >/dev/null || { echo "Fetching Apache Kafka's jars needs Maven: install it (apt-get install maven)."; exit 1; }
	rm -rf $(KAFKA_LIBS)
	mvn --batch-mode --quiet -f $(KAFKA_POM) dependency:copy-dependencies -DincludeScope=runtime \
	  -DoutputDirectory=$(CURDIR)/$(KAFKA_LIBS)
	@touch $@

# Two pytest runs side by side, each about half the suite: the slow tests but the CLI's, the tasks' and
# the network faults' (Spark and Kafka clusters, fault injection: mostly waiting on JVMs and timeouts) in
# the foreground; the CLI's, the tasks' and the network faults' slow tests (subprocesses waiting on their
# own start-up, a Kafka cluster's rolling restart, partitions held for their timeouts) then the tests not
# marked slow beside them, their report (.cache/side-tests.log) printed after the foreground's. Either
# failing fails `make test`.
SIDE_SLOW := tests/cli tests/tasks tests/faults tests/security
test: $(STAMP) tools kafka
	$(BIN)/ruff check .
	@mkdir -p .cache
	@trap 'kill $$side 2>/dev/null' INT TERM; \
	{ $(BIN)/python -m pytest -m slow $(SIDE_SLOW); slow_rc=$$?; $(BIN)/python -m pytest -m "not slow"; \
	  exit $$(( slow_rc || $$? )); } > .cache/side-tests.log 2>&1 & side=$$!; \
	echo "pytest -m slow $(SIDE_SLOW), then pytest -m 'not slow', run beside this; their report follows"; \
	$(BIN)/python -m pytest -m slow $(addprefix --ignore=,$(SIDE_SLOW)); main_rc=$$?; \
	wait $$side; side_rc=$$?; \
	echo; echo "===== pytest -m slow $(SIDE_SLOW); pytest -m 'not slow' (.cache/side-tests.log) ====="; \
	cat .cache/side-tests.log; \
	echo "the other slow tests: exit $$main_rc; pytest -m slow $(SIDE_SLOW), then the rest: exit $$side_rc"; \
	exit $$(( main_rc || side_rc ))

# issue 28: the oracle's reference runner (tests/oracle): Kafka Streams' jars of the version the Apache
# Kafka tests pin, copied by Maven into .cache/oracle/<version>/libs, and the runner compiled by javac into
# .cache/oracle/<version>/classes; rebuilt only when the pom or the runner's source changes.
ORACLE_POM := tests/oracle/java/pom.xml
ORACLE_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' $(ORACLE_POM))
ORACLE_DIR := .cache/oracle/$(ORACLE_VERSION)
ORACLE_LIBS_STAMP := $(ORACLE_DIR)/libs/.complete
ORACLE_SOURCES := $(shell find tests/oracle/java/src -name '*.java')
ORACLE_STAMP := $(ORACLE_DIR)/classes/.complete

.PHONY: oracle
oracle: $(ORACLE_STAMP)

$(ORACLE_LIBS_STAMP): $(ORACLE_POM)
	@command -v javac >/dev/null || { echo "The oracle tests need a JDK 17+ (apt-get install openjdk-17-jdk-headless)."; exit 1; }
	@command -v mvn >/dev/null || { echo "Fetching Kafka Streams' jars needs Maven: install it (apt-get install maven)."; exit 1; }
	rm -rf $(ORACLE_DIR)/libs
	mvn --batch-mode --quiet -f $(ORACLE_POM) dependency:copy-dependencies -DincludeScope=runtime \
	  -DoutputDirectory=$(CURDIR)/$(ORACLE_DIR)/libs
	@touch $@

$(ORACLE_STAMP): $(ORACLE_LIBS_STAMP) $(ORACLE_SOURCES)
	rm -rf $(ORACLE_DIR)/classes
	javac -nowarn -encoding UTF-8 --release 17 -cp '$(ORACLE_DIR)/libs/*' -d $(ORACLE_DIR)/classes $(ORACLE_SOURCES)
	@touch $@

# issue 40: librdkafka's own security tests (tests/security/test_librdkafka_suite.py) run its test-runner,
# built from librdkafka's source. npm's node-rdkafka package ships that source (deps/librdkafka, tests/
# included), so npm fetches it, its sha512 checked against the pin below, as Maven fetches Kafka's jars.
# The build takes minutes on 2 cores, so it goes outside the clone into ~/.cache/strom, keyed by the
# package's version: a fresh clone (CI's) finds it there as Maven's ~/.m2 serves Kafka's jars, and
# .cache/librdkafka links to it. Changing the pin builds a new folder (~60 MB; the objects are deleted):
# remove the old one by hand. OIDC (0126) needs libcurl's headers.
LIBRDKAFKA_NPM := node-rdkafka@3.6.1
LIBRDKAFKA_NPM_INTEGRITY := sha512-sfpTbrT35429cs0RE8Yb9avGX9BiRRvpV7aweQsghKTjtrVZP3jBrKOPItWXAqHb8doyh3SkuGuUVBLgig1SRg==
LIBRDKAFKA_HOME ?= $(HOME)/.cache/strom
LIBRDKAFKA_DIR := $(LIBRDKAFKA_HOME)/librdkafka-$(subst @,-,$(LIBRDKAFKA_NPM))
LIBRDKAFKA_STAMP := $(LIBRDKAFKA_DIR)/tests/.complete

.PHONY: librdkafka
librdkafka: $(LIBRDKAFKA_STAMP)
	@mkdir -p .cache && rm -rf .cache/librdkafka && ln -s $(LIBRDKAFKA_DIR) .cache/librdkafka

$(LIBRDKAFKA_STAMP):
	@command -v npm >/dev/null || $(call apt_install,npm) || { echo "librdkafka's test-runner is built from npm's $(LIBRDKAFKA_NPM): install npm (apt-get install npm)."; exit 1; }
	@command -v cc >/dev/null && command -v c++ >/dev/null && command -v make >/dev/null \
	  || $(call apt_install,build-essential) || { echo "Building librdkafka's test-runner needs a C and C++ compiler: install them (apt-get install build-essential)."; exit 1; }
	@printf '#include <curl/curl.h>\n#include <openssl/ssl.h>\n' | cc -E - >/dev/null 2>&1 \
	  || $(call apt_install,libssl-dev libcurl4-openssl-dev) || { echo "librdkafka's TLS and OIDC tests need OpenSSL's and libcurl's headers: install them (apt-get install libssl-dev libcurl4-openssl-dev)."; exit 1; }
	@mkdir -p $(LIBRDKAFKA_HOME) && tmp=$$(mktemp -d $(LIBRDKAFKA_HOME)/.librdkafka-XXXXXX) && trap 'rm -rf $$tmp' EXIT \
	  && echo "building librdkafka's test-runner from $(LIBRDKAFKA_NPM) in $(LIBRDKAFKA_DIR) (a few minutes)" \
	  && (cd $$tmp && npm pack --silent $(LIBRDKAFKA_NPM) >/dev/null) \
	  && got=sha512-$$($(PYTHON) -c 'import base64, hashlib, sys; print(base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' $$tmp/*.tgz) \
	  && { [ "$$got" = "$(LIBRDKAFKA_NPM_INTEGRITY)" ] || { echo "$(LIBRDKAFKA_NPM)'s tarball is $$got, not the pinned $(LIBRDKAFKA_NPM_INTEGRITY)"; exit 1; }; } \
	  && mkdir $$tmp/tree && tar xzf $$tmp/*.tgz -C $$tmp/tree --strip-components=3 package/deps/librdkafka \
	  && cd $$tmp/tree && ./configure --disable-gssapi --disable-zstd --disable-lz4-ext --enable-curl >/dev/null \
	  && $(MAKE) -j2 libs >/dev/null && $(MAKE) -j2 -C tests build >/dev/null \
	  && find . \( -name '*.o' -o -name '*.a' -o -name '*.d' \) -delete && touch tests/.complete \
	  && rm -rf $(LIBRDKAFKA_DIR) && mv $$tmp/tree $(LIBRDKAFKA_DIR)

test: oracle librdkafka

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .cache

# issue 29: the JVM peers of bench/jvm_peers.py (not needed by `make test`). Kafka Streams' jars (the
# version the Apache Kafka tests pin) and the contestant compiled into .cache/bench-jvm/kafka-streams-<v>;
# Spark's own Kafka connector (spark-sql-kafka-0-10) with the runtime jars pyspark does not ship into
# .cache/bench-jvm/spark-kafka-<v>/libs.
BENCH_KS_POM := bench/jvm/kafka-streams/pom.xml
BENCH_KS_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' $(BENCH_KS_POM))
BENCH_KS_DIR := .cache/bench-jvm/kafka-streams-$(BENCH_KS_VERSION)
BENCH_KS_SOURCES := $(shell find bench/jvm/kafka-streams/src -name '*.java')
BENCH_SK_POM := bench/jvm/spark-kafka/pom.xml
BENCH_SK_VERSION := $(shell sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' $(BENCH_SK_POM))
BENCH_SK_DIR := .cache/bench-jvm/spark-kafka-$(BENCH_SK_VERSION)

.PHONY: bench-jvm
bench-jvm: $(BENCH_KS_DIR)/classes/.complete $(BENCH_SK_DIR)/libs/.complete

$(BENCH_KS_DIR)/libs/.complete: $(BENCH_KS_POM)
	@command -v javac >/dev/null || { echo "The JVM benchmarks need a JDK 17+ (apt-get install openjdk-17-jdk-headless)."; exit 1; }
	@command -v mvn >/dev/null || { echo "Fetching Kafka Streams' jars needs Maven: install it (apt-get install maven)."; exit 1; }
	rm -rf $(BENCH_KS_DIR)/libs
	mvn --batch-mode --quiet -f $(BENCH_KS_POM) dependency:copy-dependencies -DincludeScope=runtime \
	  -DoutputDirectory=$(CURDIR)/$(BENCH_KS_DIR)/libs
	@touch $@

$(BENCH_KS_DIR)/classes/.complete: $(BENCH_KS_DIR)/libs/.complete $(BENCH_KS_SOURCES)
	rm -rf $(BENCH_KS_DIR)/classes
	javac -nowarn -encoding UTF-8 --release 17 -cp '$(BENCH_KS_DIR)/libs/*' -d $(BENCH_KS_DIR)/classes $(BENCH_KS_SOURCES)
	@touch $@

$(BENCH_SK_DIR)/libs/.complete: $(BENCH_SK_POM)
	@command -v mvn >/dev/null || { echo "Fetching Spark's Kafka connector needs Maven: install it (apt-get install maven)."; exit 1; }
	rm -rf $(BENCH_SK_DIR)/libs
	mvn --batch-mode --quiet -f $(BENCH_SK_POM) dependency:copy-dependencies -DincludeScope=runtime \
	  -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2 \
	  -DoutputDirectory=$(CURDIR)/$(BENCH_SK_DIR)/libs
	@touch $@
