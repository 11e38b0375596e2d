# Requests given up while their command is on the wire (Redis frozen, the
# statement cancelled by statement_timeout): a late grant is handed back,
# a late refusal leaves nothing, and no entry of the shared hold table is
# lost either way (the table has only 16 entries here).

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'requests given up do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('given_up', $redis,
	command_timeout => '30s',
	conf => ['rlock.max_locks = 16']);
my $foreign = 'f0f0f0f0-1111-4222-8333-444455556666:9';

sub cancelled_while_frozen
{
	my ($keys) = @_;
	$redis->freeze;
	for my $key (@$keys)
	{
		my ($rc, $out, $err) = $node->psql('postgres',
			"SET statement_timeout = '100ms'; SELECT rlock_try('$key')");
		like($err, qr/canceling statement due to statement timeout/,
			"$key: cancelled while Redis is frozen");
	}
	$redis->thaw;
}

# late refusals: the keys are held by someone else
my @busy = map { "given:busy:$_" } 1 .. 10;
for my $key (@busy)
{
	$redis->cmd('HSET', $key, $foreign, 1);
	$redis->cmd('PEXPIRE', $key, 60_000);
}
cancelled_while_frozen(\@busy);
ok( RlockTest::wait_for_redis($node, 10),
	'service resumes after the thaw');
is_deeply($redis->cmd('HKEYS', $busy[0]), [$foreign],
	'a late refusal took nothing');

# late grants: the keys are free, Redis grants after the thaw
my @free = map { "given:free:$_" } 1 .. 10;
cancelled_while_frozen(\@free);
ok( RlockTest::wait_until(
		sub { !grep { $redis->cmd('EXISTS', $_) } @free }, 10),
	'every late grant was handed back');

# no entry was lost: all 16 can be used at once
my $s = $node->background_psql('postgres');
ok( RlockTest::wait_until(
		sub {
			$s->query_safe(
				"SELECT count(*) FROM generate_series(1, 16) i WHERE rlock_session_try('given:full:' || i)"
			) eq '16' or do { $s->query_safe('SELECT rlock_release_all()'); 0 };
		},
		10),
	'all 16 entries of the hold table are free again');
$s->quit;

done_testing();
