# rlock: distributed locks in Redis for PostgreSQL, built with PGXS.
#
#   make && make install    build and install into the PostgreSQL found by
#                           pg_config
#   make test               install missing packages, build, install, run
#                           every suite against throw-away servers
#   make demo               the stock-decrement demo on throw-away servers

MODULE_big = rlock
OBJS = $(patsubst %.c,%.o,$(wildcard src/*.c))

EXTENSION = rlock
DATA = rlock--1.0.sql
PGFILEDESC = "rlock - Redisson-compatible distributed locks"

PG_CPPFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter \
	-Wno-missing-field-initializers -Wno-sign-compare
SHLIB_LINK = -lhiredis

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

.PHONY: test demo
test:
	test/harness/run-tests

demo:
	test/demo/run-demo
