
=pod

=head1 NAME

RlockTest::Cluster - a throw-away Redis Cluster on loopback ports for
rlock's tests: primaries with a replica each, made with redis-cli --cluster
create, and what tests do to it

=head1 SYNOPSIS

  my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 1);
  my @p = $cluster->primaries;              # RlockTest::Redis, by port
  my $node = $cluster->owner(1711);         # the primary serving slot 1711
  my $slot = $cluster->slot('mylock');      # CLUSTER KEYSLOT
  $cluster->stop;

Every wait is bounded and dies when the bound passes.

=cut

package RlockTest::Cluster;

use strict;
use warnings;

use File::Temp ();
use IPC::Run ();
use RlockTest::Redis;

# Start the cluster; options: primaries (3), replicas per primary (1),
# node_timeout_ms (2000), dir (for the servers' files).  Returns once
# every node says the cluster is ok and knows every other node, and every
# replica is in sync.
sub start
{
	my ($class, %opt) = @_;
	my $self = bless {
		dir => $opt{dir} // File::Temp::tempdir(CLEANUP => 1),
		nodes => [],
	}, $class;
	my $n = ($opt{primaries} // 3) * (1 + ($opt{replicas} // 1));
	for my $i (1 .. $n)
	{
		my $dir = "$self->{dir}/node$i";
		mkdir $dir;
		push @{ $self->{nodes} }, RlockTest::Redis->start(
			dir => $dir,
			tls => 0,
			args => [
				'--cluster-enabled', 'yes',
				'--cluster-config-file', "$dir/nodes.conf",
				'--cluster-node-timeout', $opt{node_timeout_ms} // 2000,
				'--repl-diskless-sync-delay', '0' ]);
	}
	my $log = '';
	IPC::Run::run(
		[ 'redis-cli', '--cluster', 'create',
		  (map { '127.0.0.1:' . $_->port } @{ $self->{nodes} }),
		  '--cluster-replicas', $opt{replicas} // 1, '--cluster-yes' ],
		'<', \undef, '>&', \$log)
	  or die "redis-cli --cluster create failed:\n$log";
	$self->wait_ok(30)
	  or die "the cluster did not come up:\n$log";
	return $self;
}

# All data nodes (RlockTest::Redis).
sub nodes { @{ $_[0]{nodes} } }

sub _node_by_port
{
	my ($self, $port) = @_;
	my ($node) = grep { $_->port == $port } @{ $self->{nodes} };
	return $node;
}

# The nodes as one of them sees them: { port => { id, role, flags,
# master_id, slots => [[start, end], ...] } } from CLUSTER NODES.
sub view
{
	my ($self, $node) = @_;
	my $text = $node->cmd('CLUSTER', 'NODES');
	die 'CLUSTER NODES: ' . ($text->{error} // 'no answer')
	  unless defined $text && !ref $text;
	my %view;
	for my $line (split /\n/, $text)
	{
		my ($id, $addr, $flags, $master, undef, undef, undef, $link, @slots) =
		  split / /, $line;
		my ($port) = $addr =~ /:(\d+)/;
		$view{$port} = {
			id => $id,
			flags => $flags,
			role => ($flags =~ /master/ ? 'master' : 'replica'),
			master_id => $master,
			link => $link,
			slots => [ map { /^(\d+)(?:-(\d+))?$/ ? [ $1, $2 // $1 ] : () } @slots ],
		};
	}
	return \%view;
}

# Wait until every live node says cluster_state:ok, knows every node as
# connected and without failure flags, and every replica has its link up;
# true if that happened within $timeout seconds.
sub wait_ok
{
	my ($self, $timeout) = @_;
	my @live = grep { $_->pid } @{ $self->{nodes} };
	return RlockTest::wait_until(
		sub {
			for my $node (@live)
			{
				my $info = eval { $node->cmd('CLUSTER', 'INFO') } // '';
				return 0 unless $info =~ /^cluster_state:ok/m;
				my $view = eval { $self->view($node) } or return 0;
				return 0 unless keys %$view >= @live;
				for my $n (@live)
				{
					my $v = $view->{ $n->port } or return 0;
					return 0 if $v->{flags} =~ /fail|handshake|noaddr/
					  || $v->{link} ne 'connected';
				}
				my $repl = eval { $node->cmd('INFO', 'replication') } // '';
				return 0
				  if $repl =~ /^role:slave/m
				  && $repl !~ /^master_link_status:up/m;
			}
			return 1;
		},
		$timeout // 30);
}

# The primaries now (RlockTest::Redis), ordered by their first slot.
sub primaries
{
	my ($self) = @_;
	my ($any) = grep { $_->pid } @{ $self->{nodes} };
	my $view = $self->view($any);
	my @p = grep { $view->{$_}{role} eq 'master' && @{ $view->{$_}{slots} } }
	  keys %$view;
	@p = sort { $view->{$a}{slots}[0][0] <=> $view->{$b}{slots}[0][0] } @p;
	return map { $self->_node_by_port($_) } @p;
}

# The primary serving slot $slot now, as a live node sees it.
sub owner
{
	my ($self, $slot) = @_;
	my ($any) = grep { $_->pid } @{ $self->{nodes} };
	my $view = $self->view($any);
	for my $port (keys %$view)
	{
		next unless $view->{$port}{role} eq 'master';
		return $self->_node_by_port($port)
		  if grep { $slot >= $_->[0] && $slot <= $_->[1] }
		  @{ $view->{$port}{slots} };
	}
	return undef;
}

# The slot of $key, as Redis computes it.
sub slot
{
	my ($self, $key) = @_;
	my ($any) = grep { $_->pid } @{ $self->{nodes} };
	return $any->cmd('CLUSTER', 'KEYSLOT', $key);
}

sub stop
{
	my ($self) = @_;
	$_->stop for @{ $self->{nodes} };
}

1;
