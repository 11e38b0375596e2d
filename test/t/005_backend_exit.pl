# A session that ends releases everything it held, in both scopes: when
# terminated with pg_terminate_backend, when it disconnects, and when it
# is terminated while waiting.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'backend exits do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('exit', $redis);

sub gone
{
	my @keys = @_;
	return RlockTest::wait_until(
		sub { !grep { $redis->cmd('EXISTS', $_) } @keys }, 5);
}

# pg_terminate_backend of a holder, with a transaction open
my $s = $node->background_psql('postgres', on_error_stop => 0);
my $pid = $s->query_safe('SELECT pg_backend_pid()');
$s->query_safe("SELECT rlock_session_try('exit:s'), rlock_session_try('exit:s')");
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('exit:x'), rlock_try('exit:s')");
is($redis->counts('exit:s')->[0], '3', 'three holds on exit:s');
is($redis->cmd('EXISTS', 'exit:x'), 1, 'one on exit:x');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
ok(gone('exit:s', 'exit:x'), 'pg_terminate_backend releases both scopes');
eval { $s->quit };

# a plain disconnect
$s = $node->background_psql('postgres');
$s->query_safe("SELECT rlock_session_try('exit:quit')");
is($redis->cmd('EXISTS', 'exit:quit'), 1, 'held before disconnecting');
$s->quit;
ok(gone('exit:quit'), 'disconnecting releases session locks');

# terminated while waiting: nothing taken, nothing left subscribed, and
# the holder keeps its lock
my $holder = $node->background_psql('postgres');
$holder->query_safe("SELECT rlock_session_try('exit:w')");
my $owner = $redis->owners('exit:w')->[0];
my $waiter = $node->background_psql('postgres', on_error_stop => 0);
$pid = $waiter->query_safe('SELECT pg_backend_pid()');
$waiter->query_until(qr/waiting/, "\\echo waiting\nSELECT rlock_lock('exit:w');\n");
ok(RlockTest::wait_for_subscribers($redis, 'exit:w', 1),
	'a waiter subscribed');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
ok(RlockTest::wait_for_subscribers($redis, 'exit:w', 0),
	'terminating it drops the subscription');
is_deeply($redis->owners('exit:w'), [$owner], 'the holder keeps the lock');
eval { $waiter->quit };
$holder->quit;
ok(gone('exit:w'), 'until it goes too');

done_testing();
