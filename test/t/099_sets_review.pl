# Review of the sets of locks (rlock_try_set and its forms) against
# interruptions and faults, each case a bug found and fixed:
#
# - rlock_session_release_set interrupted (statement_timeout) or failed
#   (58030, Redis not answering) while it waited for Redis's answer about
#   one member gave back that member only: the members after it stayed
#   held by the session, renewed by the watchdog, until the session
#   ended; now they are given back too.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'sets do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('sets_review', $redis,
	conf => ['log_min_messages = warning']);

# how many of @keys are in Redis
sub present
{
	return scalar grep { $redis->cmd('EXISTS', $_) } @_;
}

# how many keys session $s holds, as rlock_locks shows
sub holds_of
{
	my ($s) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM rlock_locks WHERE pid = $s->{rlock_pid} AND count > 0");
}

#---- a release of a set that fails half-way gives back every member ----

for my $case (
	[ 'statement_timeout', "SET statement_timeout = '300ms'", qr/57014/ ],
	[ 'Redis not answering', 'SELECT 1', qr/58030/ ])
{
	my ($what, $setup, $code) = @$case;
	my @keys = map { "rr:$_" } qw(a b c d);
	my $s = RlockTest::session($node);
	is($s->query_safe("SELECT rlock_session_try_set('{rr:a,rr:b,rr:c,rr:d}')"),
		't', "$what: a session holds a set");
	is(present(@keys), 4, "$what: all four in Redis");
	$s->query_safe($setup);
	$redis->freeze;
	RlockTest::send_query($s,
		"SELECT rlock_session_release_set('{rr:a,rr:b,rr:c,rr:d}');");
	my (undef, $err) = RlockTest::collect($s);
	$redis->thaw;
	like($err, $code, "$what: the release of the set fails");
	$s->query_safe('RESET statement_timeout');
	is(holds_of($s), 0, "$what: the session holds no member");
	ok(RlockTest::wait_until(sub { present(@keys) == 0 }, 10),
		"$what: every member given back in Redis");
	$s->quit;
}

$node->stop;
done_testing();
