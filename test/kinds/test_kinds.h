/*-------------------------------------------------------------------------
 *
 * test_kinds.h
 *		The lock kinds built for tests only (make RLOCK_TEST_KINDS=1), in
 *		the form of shared.h's list: X(NUMBER, name), numbered after the
 *		product's kinds.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		test/kinds/test_kinds.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_TEST_KINDS_H
#define RLOCK_TEST_KINDS_H

#define RLOCK_TEST_KIND_LIST(X) \
	X(TICKET, ticket)			/* test/kinds/ticket: exclusive, step 2 */

#endif							/* RLOCK_TEST_KINDS_H */
