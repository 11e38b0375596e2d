# rlock: distributed locks in Redis for PostgreSQL, built with PGXS.
#
#   make && make install    build and install into the PostgreSQL found by
#                           pg_config
#   make test               install missing packages, build, install, run
#                           every suite against throw-away servers
#   make demo               the stock-decrement demo on throw-away servers
#   make bench              benchmarks against their baselines, on
#                           throw-away servers

MODULE_big = rlock
OBJS = $(patsubst %.c,%.o,$(wildcard src/*.c src/*/*.c src/*/*/*.c))
# each folder of Lua scripts (every kind's, the worker's) gets a generated
# scripts.h; src/kinds/*.lua are the pieces the scripts share
LUA_DIRS = $(filter-out src/kinds/,$(sort $(dir $(wildcard src/*/*.lua src/kinds/*/*.lua))))
LUA_HEADERS = $(addsuffix scripts.h,$(LUA_DIRS))

# make RLOCK_TEST_KINDS=1: rlock.so with the lock kinds of test/kinds/ as
# well (test/kinds/README.md), for the tests that take them; a release
# never has them.  The stamp records which build the objects are of, and
# every object depends on it: a make of the other sort rebuilds them all
# rather than keep (or install) a library of the wrong one.
ifeq ($(RLOCK_TEST_KINDS),1)
OBJS += $(patsubst %.c,%.o,$(wildcard test/kinds/*/*.c))
LUA_DIRS += $(sort $(dir $(wildcard test/kinds/*/*.lua)))
PG_CPPFLAGS_TEST_KINDS = -DRLOCK_TEST_KINDS -I$(srcdir)/test/kinds
endif
KINDS_STAMP = .test-kinds-stamp
ifneq ($(shell cat $(KINDS_STAMP) 2>/dev/null),test-kinds=$(RLOCK_TEST_KINDS))
$(shell echo 'test-kinds=$(RLOCK_TEST_KINDS)' > $(KINDS_STAMP))
endif

EXTENSION = rlock
DATA = rlock--1.0.sql rlock--1.0--1.1.sql rlock--1.1--1.2.sql rlock--1.2--1.3.sql \
	rlock--1.3--1.4.sql rlock--1.4--1.5.sql rlock--1.5--1.6.sql \
	rlock--1.6--1.7.sql rlock--1.7--1.8.sql
PGFILEDESC = "rlock - Redisson-compatible distributed locks"
EXTRA_CLEAN = $(LUA_HEADERS) $(KINDS_STAMP) $(wildcard test/kinds/*/scripts.h \
	test/kinds/*/*.o test/kinds/*/*.bc)

# The version: rlock.control's default_version, the one place it is
# written.  A release is named by it with a third part for PGXN and Debian
# (1.4 is release 1.4.0); META.json, debian/changelog and the module's
# magic block are made from it.
TOP := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
EXTVERSION := $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(TOP)/rlock.control)
RELEASE := $(EXTVERSION).0

PG_CPPFLAGS = -I$(srcdir)/src -Wall -Wextra -Werror -Wno-unused-parameter \
	-Wno-missing-field-initializers -Wno-sign-compare \
	-DRLOCK_VERSION='"$(EXTVERSION)"' $(PG_CPPFLAGS_TEST_KINDS)
SHLIB_LINK = -lhiredis -lssl -lcrypto

# make SANITIZE=1 with_llvm=no: AddressSanitizer and UBSan, and rlock's
# Asserts on (Debian's server is built without them; c.h's Assert only
# needs ExceptionalCondition, which every server exports).  The sanitizer
# runtimes come in with rlock.so (src/rlock.c has their options).  Errors
# leave frames by siglongjmp from the server's own, uninstrumented code,
# which ASan never sees: the red zones an abandoned frame leaves poisoned
# on the stack would then be taken for a bug in the next call at that
# address (a server started with the runtime preloaded, whose interceptor
# would clear them, hangs at start).  So stack variables are not
# instrumented; heap and global accesses, UBSan and the Asserts are.
ifeq ($(SANITIZE),1)
PG_CFLAGS = -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	--param=asan-stack=0 -fno-omit-frame-pointer
PG_CPPFLAGS += -DUSE_ASSERT_CHECKING -DRLOCK_SANITIZE
SHLIB_LINK += -fsanitize=address,undefined
endif

# Suites for "make installcheck".  They need a Redis server and a config
# file naming it (test/out/rlock.conf): test/harness/run-tests provides both.
REGRESS = api errors scopes savepoints procedures tokens views shared fair \
	semaphores sets latches
REGRESS_OPTS = --temp-instance=./tmp_regress \
	--temp-config=./test/out/rlock.conf
ISOLATION = blocking wakeup commit_visible abort_release session_xact deadlock shared_matrix \
	permits
ISOLATION_OPTS = --temp-instance=./tmp_iso \
	--temp-config=./test/out/rlock.conf
TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)
# after PGXS, which sets it empty
PROVE_FLAGS += -I ./test/perl --timer
# PGXS passes on the warning flags the server was built with; a server
# built by a newer compiler (PostgreSQL 18's) may ask for one that this
# compiler lacks, which it would refuse
ifneq ($(shell $(CC) -Werror -Wmissing-variable-declarations -fsyntax-only \
	-x c /dev/null >/dev/null 2>&1 && echo yes),yes)
override CFLAGS := $(filter-out -Wmissing-variable-declarations,$(CFLAGS))
endif
# a change to any header rebuilds every file
$(OBJS) $(OBJS:.o=.bc): $(wildcard src/*.h src/*/*.h src/*/*/*.h \
	test/kinds/*.h)

# The Lua scripts, as C strings (LUA_HEADERS, above): a folder's
# scripts.h holds its own scripts, with the shared Lua of src/kinds/*.lua
# spliced in where they name it.  A new kind's folder needs no rule of
# its own.  Any .lua file changed makes every scripts.h again (it takes no
# time), and every object waits for every scripts.h, as it does for every
# header.
$(OBJS) $(OBJS:.o=.bc): $(LUA_HEADERS) $(KINDS_STAMP)
$(LUA_HEADERS): %/scripts.h: src/kinds/embed-lua \
		$(wildcard src/kinds/*.lua $(addsuffix *.lua,$(LUA_DIRS)))
	src/kinds/embed-lua $(filter $*/%.lua,$^) >$@.tmp || { rm -f $@.tmp; exit 1; }
	mv $@.tmp $@
else
# "make test" and "make demo" install PostgreSQL themselves when it is missing
all install installcheck:
	@echo "pg_config not found: install postgresql-server-dev-15, or run make test" >&2
	@exit 1
endif

# The reply reader under libFuzzer (test/fuzz/README.md): make fuzz runs
# it for FUZZ_SECONDS on the corpus; make fuzz-replay runs the corpus once.
FUZZ_SECONDS ?= 300
FUZZ_OUT = test/out/fuzz
FUZZ_CFLAGS = -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -Wno-ignored-attributes \
	-D_GNU_SOURCE -DUSE_ASSERT_CHECKING -I src \
	-I $(shell $(PG_CONFIG) --includedir-server)

$(FUZZ_OUT)/fuzz_reply: test/fuzz/fuzz_reply.c test/fuzz/shims.c \
		src/redis/reply.c src/redis/shape.c src/redis/cluster.c \
		src/redis/redis_int.h src/redis/redis.h
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^) \
		$(PGPORT_LIB) -lhiredis

# PostgreSQL's port library, which the fuzzing target and the unit
# programs link: its position-independent build (a plain libpgport.a may
# not be, and these programs are PIE), which Debian keeps in pkglibdir
# and a plain install in libdir
PGPORT_LIB = $(firstword $(wildcard \
	$(shell $(PG_CONFIG) --pkglibdir)/libpgport_shlib.a \
	$(shell $(PG_CONFIG) --libdir)/libpgport_shlib.a) libpgport_shlib.a)

# Small programs that run one piece of rlock's C code outside PostgreSQL,
# for the TAP tests that compare it with Redis (test/unit)
UNIT_OUT = test/out/unit
UNIT_CFLAGS = -g -O1 -Wall -Werror -fsanitize=address,undefined \
	-fno-sanitize-recover=undefined -Wno-ignored-attributes \
	-D_GNU_SOURCE -I src -I $(shell $(PG_CONFIG) --includedir-server)

# each program: its own .c in test/unit, and the code it runs
$(UNIT_OUT)/cluster_map: src/redis/cluster.c src/redis/reply.c test/fuzz/shims.c
$(UNIT_OUT)/reply_budget: src/redis/reply.c test/fuzz/shims.c
$(UNIT_OUT)/keyslot: src/shared/slots.c
$(UNIT_OUT)/%: test/unit/%.c $(wildcard src/*/*.h)
	@mkdir -p $(@D)
	clang $(UNIT_CFLAGS) -o $@ $(filter %.c,$^) \
		$(PGPORT_LIB) -lhiredis

fuzz: $(FUZZ_OUT)/fuzz_reply
	rm -rf $(FUZZ_OUT)/corpus $(FUZZ_OUT)/crashes
	mkdir -p $(FUZZ_OUT)/corpus $(FUZZ_OUT)/crashes
	$(FUZZ_OUT)/fuzz_reply -max_total_time=$(FUZZ_SECONDS) -max_len=8192 \
		-print_final_stats=1 -artifact_prefix=$(FUZZ_OUT)/crashes/ \
		$(FUZZ_OUT)/corpus test/fuzz/corpus

fuzz-replay: $(FUZZ_OUT)/fuzz_reply
	@$(FUZZ_OUT)/fuzz_reply -runs=0 -artifact_prefix=$(FUZZ_OUT)/ \
		test/fuzz/corpus >$(FUZZ_OUT)/replay.log 2>&1 || \
		{ cat $(FUZZ_OUT)/replay.log; exit 1; }
	@tail -1 $(FUZZ_OUT)/replay.log

.PHONY: test test-acl test-long test-matrix interop demo bench fuzz fuzz-replay dist deb
# every suite on PostgreSQL 15 and Redis 7.0, the packages, and the core
# suites of the matrix's newer rows (test/matrix/README.md)
test:
	test/harness/make-test

# the TAP tests that make rlock send every command and run every script,
# connected as the Redis users doc/configuration.md documents (test 057,
# in make test, checks those lines themselves)
test-acl:
	RLOCK_ONLY=acl test/harness/run-tests

# the TAP tests that wait out leases and failovers for minutes, or load
# locks for long, which make test leaves out (test/harness/run-tests:
# long_tests)
test-long:
	RLOCK_TAP="035 058 063 070 081 107 108" test/harness/run-tests

# every suite on every row of the matrix
test-matrix:
	test/matrix/run-matrix --full pg16-redis7 pg17-redis8 pg18-valkey8

# The release tarball (for PGXN too): the files git tracks, and META.json
DIST = rlock-$(RELEASE)
META.json: $(TOP)/META.json.in $(TOP)/rlock.control
	sed 's/@RELEASE@/$(RELEASE)/g' $< >$@

dist: META.json
	rm -rf $(DIST) $(DIST).tar.gz
	mkdir $(DIST)
	git -C $(TOP) ls-files -z | tar -C $(TOP) --null -T - -cf - | tar -C $(DIST) -xf -
	cp META.json $(DIST)/
	tar --owner=0 --group=0 --sort=name -czf $(DIST).tar.gz $(DIST)
	rm -rf $(DIST)
	@echo $(DIST).tar.gz

# Debian's packages for each PostgreSQL major whose server headers are
# installed (debian/pgversions), into ..: debian/control and
# debian/changelog are made here
debian/changelog: $(TOP)/rlock.control
	printf 'rlock (%s) unstable; urgency=medium\n\n  * rlock %s.\n\n -- rlock developers <maintainers@rlock.invalid>  %s\n' \
		'$(RELEASE)' '$(RELEASE)' "$$(date -R)" >$@

deb: debian/changelog
	pg_buildext updatecontrol
	dpkg-buildpackage -b -us -uc

# the tests against the real Redisson (Java), node-redisson, HikariCP and
# Spring only
interop:
	RLOCK_TAP="034 035 036 039 045 050 058 078 081 083 090 091 093 097" test/harness/run-tests

demo:
	test/demo/run-demo

bench:
	test/bench/run-bench
