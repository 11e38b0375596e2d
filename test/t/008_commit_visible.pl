# A transaction-scoped lock is released after the commit is visible, not
# before.  The commit is held open deterministically: with a synchronous
# standby that does not exist, COMMIT waits after writing its commit
# record but before the transaction becomes visible.  The lock must stay
# held for as long, and the waiter that gets it must see the new row.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'what a commit makes visible does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
# only the holder asks for synchronous commit
my $node = RlockTest::node('visible', $redis,
	conf => [
		"wal_level = replica", "max_wal_senders = 2",
		"synchronous_standby_names = 'nobody'",
		"synchronous_commit = local"
	]);
$node->safe_psql('postgres', 'CREATE TABLE t (v int)');

my $holder = $node->background_psql('postgres', on_error_stop => 0);
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
$holder->query_safe('SET synchronous_commit = on');
$holder->query_safe('BEGIN');
$holder->query_safe("SELECT rlock_try('visible:k')");
$holder->query_safe('INSERT INTO t VALUES (1)');

my $waiter = $node->background_psql('postgres');
$waiter->query_until(qr/waiting/,
	"\\echo waiting\nBEGIN;\nSELECT rlock_try('visible:k', '60 s');\nCOMMIT;\n");

$holder->query_until(qr/committing/, "\\echo committing\nCOMMIT;\n");
ok( RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT wait_event FROM pg_stat_activity WHERE pid = $holder_pid"
			) eq 'SyncRep';
		}),
	'the holder is inside COMMIT, waiting for the synchronous standby');
is( $node->safe_psql('postgres', 'SELECT count(*) FROM t'),
	'0', 'its row is not visible yet');
is(scalar @{ $redis->owners('visible:k') }, 1, 'so the lock is still held');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT rlock_try(''visible:k''%' AND wait_event_type = 'Extension'"
	),
	'1',
	'and the waiter still waits');

# let the commit finish: cancelling the wait for the standby makes the
# already written commit visible
$node->safe_psql('postgres', "SELECT pg_cancel_backend($holder_pid)");
like(scalar $waiter->query("SELECT 'got it'"), qr/^t\n/,
	'once the commit is visible the waiter gets the lock');
is($waiter->query_safe('SELECT count(*) FROM t'), '1',
	'and reads the committed row');
$holder->quit;
$waiter->quit;

done_testing();
